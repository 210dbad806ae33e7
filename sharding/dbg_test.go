package sharding_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding/fakeleases"
)

func TestDbgList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := fakeleases.New()
		ref := &refuser{verb: "list"}
		r := permReplica(t, store, "a", nil, ref, false)
		t.Log("start", time.Now())
		err := r.Run(context.Background())
		t.Log("end", time.Now(), err, ref.firstAt())
	})
}
