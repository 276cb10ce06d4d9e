// kbclientgo — client-go informers for kbridge's tests and benchmark.
//
// Why a Go program: the claim under test is "client-go works against kbridge
// as against the API server", so the client must be client-go itself, with
// its reflector, watch-list and relist logic, not a re-implementation.
//
//	kbclientgo informer --kubeconfig F --resource v1/pods|GROUP/VERSION/RESOURCE [--selector S]
//	    one SharedIndexInformer; stdin commands, one JSON line answered each:
//	    "dump"  → {"synced":bool,"store":{"ns/name":"rv",…}}
//	    "quit"  → exits
//	kbclientgo watchers --kubeconfig F --n N [--resource v1/pods]
//	    N independent informers (N lists and N watches); for every add/update
//	    the latency from the object's annotation kb-bench/t (unix ns) to now.
//	    "stats" → {"synced":n,"events":n,"p50_ms":x,"p99_ms":x,"max_ms":x}
//	    "reset" → {} (clears the latencies), "quit" exits.
//
// client-go's own switches apply: KUBE_FEATURE_WatchListClient=true|false
// turns streaming lists on or off.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func parseGVR(s string) schema.GroupVersionResource {
	p := strings.Split(s, "/")
	if len(p) == 2 {
		return schema.GroupVersionResource{Version: p[0], Resource: p[1]}
	}
	if len(p) != 3 {
		fmt.Fprintf(os.Stderr, "--resource %q: want VERSION/RESOURCE or GROUP/VERSION/RESOURCE\n", s)
		os.Exit(2)
	}
	return schema.GroupVersionResource{Group: p[0], Version: p[1], Resource: p[2]}
}

func client(kubeconfig string, qps float32) dynamic.Interface {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubeconfig: %v\n", err)
		os.Exit(2)
	}
	cfg.QPS, cfg.Burst = qps, int(qps)*2
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		os.Exit(2)
	}
	return dc
}

func newInformer(dc dynamic.Interface, gvr schema.GroupVersionResource, selector string) cache.SharedIndexInformer {
	return dynamicinformer.NewFilteredDynamicInformer(dc, gvr, metav1.NamespaceAll, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = selector }).Informer()
}

func reply(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func runInformer(args []string) {
	fs := flag.NewFlagSet("informer", flag.ExitOnError)
	kc := fs.String("kubeconfig", "", "kubeconfig file")
	res := fs.String("resource", "v1/pods", "VERSION/RESOURCE or GROUP/VERSION/RESOURCE")
	sel := fs.String("selector", "", "label selector")
	fs.Parse(args)
	inf := newInformer(client(*kc, 50), parseGVR(*res), *sel)
	stop := make(chan struct{})
	go inf.Run(stop)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch strings.TrimSpace(in.Text()) {
		case "dump":
			store := map[string]string{}
			for _, o := range inf.GetStore().List() {
				u := o.(*unstructured.Unstructured)
				k, _ := cache.MetaNamespaceKeyFunc(u)
				store[k] = u.GetResourceVersion()
			}
			reply(map[string]any{"synced": inf.HasSynced(), "store": store})
		case "quit":
			close(stop)
			return
		}
	}
	close(stop)
}

type latencies struct {
	mu     sync.Mutex
	ms     []float64
	events int
}

func (l *latencies) observe(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	t, err := strconv.ParseInt(u.GetAnnotations()["kb-bench/t"], 10, 64)
	l.mu.Lock()
	l.events++
	if err == nil {
		l.ms = append(l.ms, float64(time.Now().UnixNano()-t)/1e6)
	}
	l.mu.Unlock()
}

func (l *latencies) stats(synced int) map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := append([]float64(nil), l.ms...)
	sort.Float64s(s)
	q := func(p float64) float64 {
		if len(s) == 0 {
			return 0
		}
		return s[int(p*float64(len(s)-1))]
	}
	return map[string]any{"synced": synced, "events": l.events, "measured": len(s), "p50_ms": q(0.5),
		"p99_ms": q(0.99), "max_ms": q(1)}
}

func runWatchers(args []string) {
	fs := flag.NewFlagSet("watchers", flag.ExitOnError)
	kc := fs.String("kubeconfig", "", "kubeconfig file")
	res := fs.String("resource", "v1/pods", "VERSION/RESOURCE or GROUP/VERSION/RESOURCE")
	n := fs.Int("n", 10, "informers")
	fs.Parse(args)
	dc := client(*kc, 5000)
	gvr := parseGVR(*res)
	lat := &latencies{}
	stop := make(chan struct{})
	var infs []cache.SharedIndexInformer
	for i := 0; i < *n; i++ {
		inf := newInformer(dc, gvr, "")
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { lat.observe(o) },
			UpdateFunc: func(_, o any) { lat.observe(o) },
			DeleteFunc: func(o any) { lat.observe(o) },
		})
		infs = append(infs, inf)
		go inf.Run(stop)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch strings.TrimSpace(in.Text()) {
		case "stats":
			synced := 0
			for _, inf := range infs {
				if inf.HasSynced() {
					synced++
				}
			}
			reply(lat.stats(synced))
		case "reset":
			lat.mu.Lock()
			lat.ms, lat.events = nil, 0
			lat.mu.Unlock()
			reply(map[string]any{})
		case "quit":
			close(stop)
			return
		}
	}
	close(stop)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kbclientgo informer|watchers [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "informer":
		runInformer(os.Args[2:])
	case "watchers":
		runWatchers(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, "usage: kbclientgo informer|watchers [flags]")
		os.Exit(2)
	}
}
