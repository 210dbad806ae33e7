// Package sharding runs one controller on many replicas: the keys of a
// workqueue are split into shards, ranges of a 64-bit FNV-1a hash of each
// object's UID or namespace (KEP-5866's shardRange), and each replica
// processes only the keys of the shards it holds. Replicas coordinate
// through coordination.k8s.io/v1 Leases in one namespace and nothing else:
// no replica is special and there is no separate sharder.
//
// A replica owns the cache of the sharded resource: it lists and watches
// only the objects of the shards it holds (server-side, with KEP-5866's
// ListOptions.ShardSelector, where the API server honours it; otherwise
// one full watch filtered on the client), and admits a shard's keys only
// once that cache has synced the shard.
//
//	import (
//		"k8s.io/apimachinery/pkg/runtime"
//		"k8s.io/apimachinery/pkg/watch"
//		appslisters "k8s.io/client-go/listers/apps/v1"
//		"k8s.io/client-go/tools/cache"
//	)
//
//	deployments := client.AppsV1().Deployments(metav1.NamespaceAll)
//	r, err := sharding.New(sharding.Config{
//		Client: client, Namespace: "kube-system", Name: "my-controller",
//		Identity: podName, Queue: q,
//		Object: &appsv1.Deployment{},
//		// Over the typed client, which client-go's fake clientset serves too.
//		ListerWatcher: &cache.ListWatch{
//			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
//				return deployments.List(ctx, o)
//			},
//			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
//				return deployments.Watch(ctx, o)
//			},
//		},
//	})
//	if err != nil {
//		return err
//	}
//	lister := appslisters.NewDeploymentLister(r.Informer().GetIndexer()) // only the held shards' objects
//	go r.Run(ctx)                                                         // holds shards, fills the cache, feeds q
//	return workqueue.Run(ctx, q, 4, r.Handler(syncDeployment))           // runs only owned keys
//
// docs/contract.md gives the contract and the timing assumption,
// docs/measured.md a scaling sheet.
package sharding
