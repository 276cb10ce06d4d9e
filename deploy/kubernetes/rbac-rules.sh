#!/usr/bin/env bash
# deploy/kubernetes/rbac-rules.sh — print a least-privilege ClusterRole for kbridge's informers.
#
#   deploy/kubernetes/rbac-rules.sh [--name NAME] RESOURCE...
#   deploy/kubernetes/rbac-rules.sh --lease-namespace NS [--name NAME] RESOURCE...
#   deploy/kubernetes/rbac-rules.sh --help
#
# Each RESOURCE is `resource` for the core group or `group/resource` for any
# other group, exactly as the informer's `group` and `resource` keys say:
#
#   deploy/kubernetes/rbac-rules.sh pods configmaps apps/deployments example.com/widgets
#
# prints one rule per API group with verbs get, list and watch (what an
# informer uses, nothing more), and for a resource outside the groups
# kube-apiserver serves itself (a CRD's) get on that CRD by name, from which
# kbridge's Kubernetes API learns its printer columns and selectable fields.
# Paste it over the ClusterRole in
# base/rbac.yaml. For informers restricted to namespaces, change kind to Role
# (and the binding to a RoleBinding) in each of those namespaces.
#
# --lease-namespace NS also prints the Role for ha.enabled: get, create and
# update on leases (coordination.k8s.io) in NS, kbridge's own namespace.
set -euo pipefail
usage() { sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
name=kbridge-reader
lease_ns=""
while [[ $# -gt 0 && $1 == -* ]]; do
    case $1 in
    -h | --help) usage; exit 0 ;;
    --name)
        [[ $# -ge 2 && -n $2 ]] || { echo "rbac-rules.sh: --name needs a value" >&2; exit 2; }
        name=$2
        shift 2 ;;
    --lease-namespace)
        [[ $# -ge 2 && $2 =~ ^[a-z0-9-]+$ ]] || { echo "rbac-rules.sh: --lease-namespace needs a namespace" >&2; exit 2; }
        lease_ns=$2
        shift 2 ;;
    --) shift; break ;;
    *) echo "rbac-rules.sh: unknown option \"$1\" (try --help)" >&2; exit 2 ;;
    esac
done
if [[ $# -eq 0 ]]; then
    usage >&2
    exit 2
fi
builtin=" apps batch autoscaling policy extensions networking.k8s.io rbac.authorization.k8s.io storage.k8s.io
 coordination.k8s.io discovery.k8s.io events.k8s.io certificates.k8s.io scheduling.k8s.io node.k8s.io
 apiextensions.k8s.io apiregistration.k8s.io admissionregistration.k8s.io flowcontrol.apiserver.k8s.io
 authentication.k8s.io authorization.k8s.io resource.k8s.io internal.apiserver.k8s.io storagemigration.k8s.io "
declare -A by_group=()
order=()
crds=""
for arg in "$@"; do
    if [[ $arg == */* ]]; then group=${arg%/*} res=${arg##*/}; else group="" res=$arg; fi
    if [[ ! $res =~ ^[a-z0-9.-]+$ || ! $group =~ ^[a-z0-9.-]*$ ]]; then
        echo "rbac-rules.sh: \"$arg\" is not [group/]resource (lower-case plural, e.g. apps/deployments)" >&2
        exit 2
    fi
    k=":$group" # bash arrays refuse "" as a key
    [[ -v by_group[$k] ]] || order+=("$k")
    by_group[$k]+="${by_group[$k]:+, }$res"
    if [[ -n $group && $builtin != *" $group "* && ", $crds, " != *", $res.$group, "* ]]; then
        crds+="${crds:+, }$res.$group"
    fi
done
cat <<HEAD
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: $name
rules:
HEAD
for k in "${order[@]}"; do
    printf -- '- apiGroups: ["%s"]\n  resources: [%s]\n  verbs: [get, list, watch]\n' "${k#:}" "${by_group[$k]}"
done
if [[ -n $crds ]]; then
    printf -- '- apiGroups: [apiextensions.k8s.io]\n  resources: [customresourcedefinitions]\n'
    printf -- '  resourceNames: [%s]\n  verbs: [get]\n' "$crds"
fi
if [[ -n $lease_ns ]]; then
    cat <<LEASE
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: $name-lease
  namespace: $lease_ns
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
LEASE
fi
