// kbclientgo — client-go informers for kbridge's tests and benchmark.
//
// Why a Go program: the claim under test is "client-go works against kbridge
// as against the API server", so the client must be client-go itself, with
// its reflector, watch-list and relist logic, not a re-implementation.
//
//	kbclientgo informer --kubeconfig F --resource v1/pods|GROUP/VERSION/RESOURCE [--selector S]
//	                   [--field-selector S]
//	    one SharedIndexInformer; stdin commands, one JSON line answered each:
//	    "dump"  → {"synced":bool,"store":{"ns/name":"rv",…}}
//	    "quit"  → exits
//	kbclientgo typed --kubeconfig F --kind secrets|pods [--field-selector S]
//	    one typed informer (corev1.Secret or corev1.Pod decoded by client-go's
//	    typed client, as controllers and node agents run them); "dump" answers
//	    {"synced":bool,"store":{"ns/name":"uid rv …",…}} — a pod adds its
//	    spec.nodeName and status.phase, a secret its type and data keys.
//	kbclientgo watchers --kubeconfig F --n N [--resource v1/pods]
//	    N independent informers (N lists and N watches); for every add/update
//	    the latency from the object's annotation kb-bench/t (unix ns) to now.
//	    "stats" → {"synced":n,"events":n,"p50_ms":x,"p99_ms":x,"max_ms":x}
//	    "reset" → {} (clears the latencies), "quit" exits.
//	kbclientgo bench --kubeconfig F [--transform]
//	    one typed Pod SharedIndexInformer (corev1.Pod, as a controller keeps
//	    them), for bench/million.py; --transform drops metadata.managedFields
//	    with SetTransform before objects enter the cache. stdin commands:
//	    "stats" → {"synced":bool,"syncedMs":ms from start to synced,
//	               "adds":n,"updates":n,"deletes":n} (handler calls; cheap)
//	    "objects" → {"objects":n in the store,"heapInuse":bytes} (stops the world)
//	    "query SEL [REPEAT]" → {"matched":n,"ms":median,"minMs":x}: the
//	               lister's List(selector) timed in-process, REPEAT times
//	    "quit" exits.
//
// client-go's own switches apply: KUBE_FEATURE_WatchListClient=true|false
// turns streaming lists on or off.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
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

func newInformer(dc dynamic.Interface, gvr schema.GroupVersionResource, selector, fields string) cache.SharedIndexInformer {
	return dynamicinformer.NewFilteredDynamicInformer(dc, gvr, metav1.NamespaceAll, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector, o.FieldSelector = selector, fields }).Informer()
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
	fsel := fs.String("field-selector", "", "field selector")
	fs.Parse(args)
	inf := newInformer(client(*kc, 50), parseGVR(*res), *sel, *fsel)
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
		inf := newInformer(dc, gvr, "", "")
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

// typedView is one typed object as "dump" shows it: what a typed lister
// hands a controller, enough to compare two informers' final views.
func typedView(o any) (string, string) {
	switch t := o.(type) {
	case *corev1.Pod:
		return t.Namespace + "/" + t.Name, fmt.Sprintf("%s %s %s %s", t.UID, t.ResourceVersion, t.Spec.NodeName,
			t.Status.Phase)
	case *corev1.Secret:
		keys := make([]string, 0, len(t.Data))
		for k := range t.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return t.Namespace + "/" + t.Name, fmt.Sprintf("%s %s %s %s", t.UID, t.ResourceVersion, t.Type,
			strings.Join(keys, ","))
	}
	return "", ""
}

func runTyped(args []string) {
	fs := flag.NewFlagSet("typed", flag.ExitOnError)
	kc := fs.String("kubeconfig", "", "kubeconfig file")
	kind := fs.String("kind", "pods", "secrets or pods")
	fsel := fs.String("field-selector", "", "field selector")
	fs.Parse(args)
	cv1 := typedClient(*kc, 50)
	var lw *cache.ListWatch
	var obj runtime.Object
	switch *kind {
	case "pods":
		c := cv1.Pods(metav1.NamespaceAll)
		lw, obj = typedListWatch(c.List, c.Watch, *fsel), &corev1.Pod{}
	case "secrets":
		c := cv1.Secrets(metav1.NamespaceAll)
		lw, obj = typedListWatch(c.List, c.Watch, *fsel), &corev1.Secret{}
	default:
		fmt.Fprintf(os.Stderr, "--kind %q: want secrets or pods\n", *kind)
		os.Exit(2)
	}
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	stop := make(chan struct{})
	go inf.Run(stop)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch strings.TrimSpace(in.Text()) {
		case "dump":
			store := map[string]string{}
			for _, o := range inf.GetStore().List() {
				k, v := typedView(o)
				store[k] = v
			}
			reply(map[string]any{"synced": inf.HasSynced(), "store": store})
		case "quit":
			close(stop)
			return
		}
	}
	close(stop)
}

// typedListWatch lists and watches through a typed client's List and Watch,
// with fields as the field selector ("" for none).
func typedListWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), fields string) *cache.ListWatch {
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = fields
			return list(context.Background(), o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = fields
			return watchFn(context.Background(), o)
		},
	}
}

func typedClient(kubeconfig string, qps float32) *corev1client.CoreV1Client {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubeconfig: %v\n", err)
		os.Exit(2)
	}
	cfg.QPS, cfg.Burst = qps, int(qps)*2
	cv1, err := corev1client.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		os.Exit(2)
	}
	return cv1
}

type benchCounts struct{ adds, updates, deletes atomic.Int64 }

// dropManagedFields is the transform client-go's users add to save memory.
func dropManagedFields(o any) (any, error) {
	if p, ok := o.(*corev1.Pod); ok {
		p.ManagedFields = nil
	}
	return o, nil
}

// newPodInformer is a typed Pod informer over kubeconfig's server, built
// as controllers build theirs (the typed client's List and Watch).
func newPodInformer(kubeconfig string, transform bool) cache.SharedIndexInformer {
	pods := typedClient(kubeconfig, 1000).Pods(metav1.NamespaceAll)
	lw := typedListWatch(pods.List, pods.Watch, "")
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if transform {
		inf.SetTransform(dropManagedFields)
	}
	return inf
}

func runBench(args []string) {
	start := time.Now()
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	kc := fs.String("kubeconfig", "", "kubeconfig file")
	transform := fs.Bool("transform", false, "drop metadata.managedFields before caching")
	fs.Parse(args)
	inf := newPodInformer(*kc, *transform)
	var n benchCounts
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { n.adds.Add(1) },
		UpdateFunc: func(_, _ any) { n.updates.Add(1) },
		DeleteFunc: func(any) { n.deletes.Add(1) },
	})
	lister := listersv1.NewPodLister(inf.GetIndexer())
	stop := make(chan struct{})
	var syncedMs atomic.Int64
	syncedMs.Store(-1)
	go inf.Run(stop)
	go func() {
		if cache.WaitForCacheSync(stop, inf.HasSynced) {
			syncedMs.Store(time.Since(start).Milliseconds())
		}
	}()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "stats":
			reply(map[string]any{"synced": syncedMs.Load() >= 0, "syncedMs": syncedMs.Load(),
				"adds": n.adds.Load(), "updates": n.updates.Load(), "deletes": n.deletes.Load()})
		case "objects":
			var ms goruntime.MemStats
			goruntime.ReadMemStats(&ms)
			reply(map[string]any{"objects": len(inf.GetStore().ListKeys()), "heapInuse": ms.HeapInuse})
		case "query":
			reply(benchQuery(lister, f[1:]))
		case "quit":
			close(stop)
			return
		}
	}
	close(stop)
}

// benchQuery times lister.List(selector) REPEAT times (default 5): the
// median and the fastest, in milliseconds.
func benchQuery(lister listersv1.PodLister, f []string) map[string]any {
	if len(f) == 0 {
		return map[string]any{"error": "query SEL [REPEAT]"}
	}
	sel, err := labels.Parse(f[0])
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	repeat := 5
	if len(f) > 1 {
		repeat, _ = strconv.Atoi(f[1])
		repeat = max(repeat, 1)
	}
	var times []float64
	matched := 0
	for i := 0; i < repeat; i++ {
		t := time.Now()
		got, _ := lister.List(sel)
		times = append(times, float64(time.Since(t).Microseconds())/1000)
		matched = len(got)
	}
	sort.Float64s(times)
	return map[string]any{"matched": matched, "ms": times[len(times)/2], "minMs": times[0]}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kbclientgo informer|typed|watchers|bench [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "informer":
		runInformer(os.Args[2:])
	case "watchers":
		runWatchers(os.Args[2:])
	case "bench":
		runBench(os.Args[2:])
	case "typed":
		runTyped(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, "usage: kbclientgo informer|typed|watchers|bench [flags]")
		os.Exit(2)
	}
}
