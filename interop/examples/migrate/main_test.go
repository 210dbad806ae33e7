package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Each trial stops its informer (factory.Shutdown waits for it) and its
// workers before Run returns. One goroutine is client-go's to keep: its
// rate-limiting queue's ShutDownWithDrain shuts down the inner queue but
// not the delaying layer, whose waiting loop runs until ShutDown (ours
// has no goroutine to stop).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"))
}

// TestMigration is the newcomer's trial, on client-go's queue and on ours
// side by side: the same controller, moved by changing its import, its
// queue's type and constructor, must converge and, when its context ends
// with keys still queued, return from Run as client-go's does (its workers
// stop on the context, then it calls ShutDownWithDrain).
//
// On a queue whose ShutDownWithDrain waits until no key is ready (this
// repository before issue #25), the go-coalesce trial's Run never returns:
// the test then fails after its timeout instead of hanging, and leaves
// that controller's goroutines behind (goleak reports them too).
func TestMigration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, v := range Variants {
		t.Run(v.Name, func(t *testing.T) {
			var out strings.Builder
			res, err := Trial(ctx, v, 100, 20*time.Second, &out)
			t.Log("\n" + out.String())
			require.NoError(t, err)
			assert.True(t, res.Converged, "the controller converged over every ConfigMap")
			assert.True(t, res.Returned, "Run returned after its context ended")
			assert.Positive(t, res.Left, "keys were still queued when the context ended: the drain had keys it could have waited for")
		})
	}
}
