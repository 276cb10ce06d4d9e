{{/*
Names and labels. The full name is <release>-kbridge unless the release name
already contains "kbridge"; every selector is the two selectorLabels, so a
Service, the PDB and the NetworkPolicy select exactly this release's pods.
*/}}
{{- define "kbridge.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kbridge.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kbridge.labels" -}}
{{ include "kbridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* On the one Service the ServiceMonitor scrapes through (one scrape per pod). */}}
{{- define "kbridge.metricsLabel" -}}
kbridge.io/metrics: "true"
{{- end -}}

{{- define "kbridge.serviceAccountName" -}}
{{- default (include "kbridge.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The existing token Secret's name, "" when the chart makes one (http.existingSecret: its older name). */}}
{{- define "kbridge.existingTokenSecret" -}}
{{- .Values.http.existingTokenSecret | default .Values.http.existingSecret | default "" -}}
{{- end -}}

{{- define "kbridge.httpSecret" -}}
{{- default (printf "%s-http" (include "kbridge.fullname" .)) (include "kbridge.existingTokenSecret" .) -}}
{{- end -}}

{{/* The scraper's metrics-only token (http.metrics_token_file): the named Secret, else <fullname>-metrics. */}}
{{- define "kbridge.metricsSecret" -}}
{{- default (printf "%s-metrics" (include "kbridge.fullname" .)) .Values.http.existingMetricsTokenSecret -}}
{{- end -}}

{{- define "kbridge.tlsSecret" -}}
{{- default (printf "%s-tls" (include "kbridge.fullname" .)) .Values.http.tls.existingSecret -}}
{{- end -}}

{{- define "kbridge.brokerSecret" -}}
{{- default (printf "%s-broker" (include "kbridge.fullname" .)) .Values.brokerSecret.existingSecret -}}
{{- end -}}

{{- define "kbridge.shardsService" -}}
{{- printf "%s-shards" (include "kbridge.fullname" .) -}}
{{- end -}}

{{/*
kbridge.libconfig: one YAML value as libconfig text. Maps are groups, lists
of maps are lists, other lists are arrays; a whole number is an integer and
anything else with a point a float (libconfig accepts an integer where a
float is expected, never the reverse); names that are not plain identifiers
(Kafka properties such as "sasl.username") are quoted.
Call with (dict "v" VALUE "indent" N).
*/}}
{{- define "kbridge.libconfig" -}}
{{- $v := .v -}}
{{- $pad := repeat (int .indent) "  " -}}
{{- if kindIs "map" $v -}}
{
{{- range $k, $x := $v }}
{{ $pad }}  {{ if regexMatch "^[A-Za-z*][-A-Za-z0-9_*]*$" $k }}{{ $k }}{{ else }}{{ $k | quote }}{{ end }} = {{ include "kbridge.libconfig" (dict "v" $x "indent" (add1 $.indent)) }};
{{- end }}
{{ $pad }}}
{{- else if kindIs "slice" $v -}}
{{- if and $v (kindIs "map" (first $v)) -}}
(
{{- range $i, $x := $v }}
{{ $pad }}  {{ include "kbridge.libconfig" (dict "v" $x "indent" (add1 $.indent)) }}{{ if lt (add1 $i) (len $v) }},{{ end }}
{{- end }}
{{ $pad }})
{{- else -}}
[ {{ range $i, $x := $v }}{{ if $i }}, {{ end }}{{ include "kbridge.libconfig" (dict "v" $x "indent" 0) }}{{ end }} ]
{{- end -}}
{{- else if kindIs "bool" $v -}}
{{ $v }}
{{- else if or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v) -}}
{{- if eq (float64 $v) (floor $v) -}}{{ int64 $v }}{{- else -}}{{ $v }}{{- end -}}
{{- else if kindIs "invalid" $v -}}
""
{{- else -}}
"{{ toString $v | replace "\\" "\\\\" | replace "\"" "\\\"" | replace "\n" "\\n" }}"
{{- end -}}
{{- end -}}

{{/* The informers' RBAC rules: {namespace or "" for cluster-wide: {group: [resources]}}. */}}
{{- define "kbridge.rbacScopes" -}}
{{- $scopes := dict -}}
{{- range $inf := .Values.config.informers -}}
{{- $group := default "" $inf.group -}}
{{- range $ns := default (list "") $inf.namespaces -}}
{{- $byGroup := get $scopes $ns | default (dict) -}}
{{- $_ := set $byGroup $group (append (get $byGroup $group | default (list)) $inf.resource | uniq) -}}
{{- $_ := set $scopes $ns $byGroup -}}
{{- end -}}
{{- end -}}
{{- toJson $scopes -}}
{{- end -}}

{{- /* The CRD names (<resource>.<group>) of the informers whose group is not one kube-apiserver
serves itself: kbridge reads these CRDs (get) for their printer columns and selectable fields. */ -}}
{{- define "kbridge.crdNames" -}}
{{- $builtin := list "" "apps" "batch" "autoscaling" "policy" "extensions" "networking.k8s.io" "rbac.authorization.k8s.io" "storage.k8s.io" "coordination.k8s.io" "discovery.k8s.io" "events.k8s.io" "certificates.k8s.io" "scheduling.k8s.io" "node.k8s.io" "apiextensions.k8s.io" "apiregistration.k8s.io" "admissionregistration.k8s.io" "flowcontrol.apiserver.k8s.io" "authentication.k8s.io" "authorization.k8s.io" "resource.k8s.io" "internal.apiserver.k8s.io" "storagemigration.k8s.io" -}}
{{- $names := list -}}
{{- range $inf := .Values.config.informers -}}
{{- $group := default "" $inf.group -}}
{{- if not (has $group $builtin) -}}
{{- $names = append $names (printf "%s.%s" $inf.resource $group) | uniq -}}
{{- end -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}
