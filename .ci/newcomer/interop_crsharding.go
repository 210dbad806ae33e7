package main

import (
	"fmt"

	"github.com/go-coalesce/workqueue/interop/crsharding"
	"github.com/go-coalesce/workqueue/sharding"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The crsharding module: a Sharding built as its package doc shows hands
// controller-runtime a queue that refuses the keys of shards the replica
// does not hold (before it runs, none).
func init() {
	register("interop/crsharding", func() (string, error) {
		sh, err := crsharding.New(crsharding.Config{Ring: sharding.Config{
			Client: fake.NewClientset(), Namespace: "kube-system", Name: "configmaps",
			Identity: "newcomer", Object: &corev1.ConfigMap{},
		}})
		if err != nil {
			return "", err
		}
		o := sh.ControllerOptions(controller.Options{})
		q := o.NewQueue("configmaps", nil)
		defer q.ShutDown()
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "c1"}})
		if n := q.Len(); n != 0 {
			return "", fmt.Errorf("a replica holding no shard queued %d requests, want 0", n)
		}
		return "a replica that holds no shard admits no request to its controller's queue", nil
	})
}
