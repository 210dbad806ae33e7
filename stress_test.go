package workqueue_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
)

// TestStress runs producers that add random keys from a small key space
// (so that adds collide with queued and processing keys) against workers
// that Get and Done, some with GetContext and contexts cancelled under
// them. Run it with -race. It checks the two promises that matter to a
// controller:
//
//   - no key is processed by two workers at once;
//   - every add is seen: for every key, some processing started after the
//     key's last Add (each Add is preceded by a bump of the key's version,
//     each processing reads the version right after Get, and after the run
//     the highest version read must equal the last version bumped).
//
// The run happens in a synctest bubble so that "the producers are done and
// every worker is idle" can be waited for exactly (synctest.Wait): at that
// point no key may be ready or processing. That is checked before ShutDown,
// whose broadcast would otherwise hide a lost wake-up.
func TestStress(t *testing.T) {
	const (
		keys      = 32
		producers = 4
		workers   = 8
		epochs    = 50
	)
	addsPerProducer := 50_000
	if workqueue.RaceBuild() {
		addsPerProducer = 40_000
	}
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[int]()
		var (
			version  [keys]atomic.Int64 // bumped before each Add
			seen     [keys]atomic.Int64 // highest version read after a Get
			inFlight [keys]atomic.Bool  // set between Get and Done
			overlaps atomic.Int64       // a key handed to two workers at once
			runs     atomic.Int64       // keys handed out
			ctxErrs  atomic.Int64       // GetContext calls ended by their context
		)
		process := func(k int) {
			if inFlight[k].Swap(true) {
				overlaps.Add(1)
			}
			v := version[k].Load()
			for {
				old := seen[k].Load()
				if v <= old || seen[k].CompareAndSwap(old, v) {
					break
				}
			}
			// Give producers and other workers a chance to run while the
			// key is processing: adds must meet processing keys for the
			// version check to mean anything, and overlaps need the window.
			runtime.Gosched()
			inFlight[k].Store(false)
			q.Done(k)
			runs.Add(1)
		}

		// Cancellations arrive from their own goroutine, so that they race
		// with Adds and with the getters' wake-ups.
		cancels := make(chan context.CancelFunc, workers)
		var canceller sync.WaitGroup
		canceller.Go(func() {
			for cancel := range cancels {
				cancel()
			}
		})

		var ws sync.WaitGroup
		for w := range workers {
			if w%2 == 0 {
				ws.Go(func() {
					for {
						k, shutdown := q.Get()
						if shutdown {
							return
						}
						process(k)
					}
				})
				continue
			}
			ws.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for {
					ctx, cancel := context.WithCancel(context.Background())
					if rng.IntN(4) == 0 {
						select {
						case cancels <- cancel:
						default:
						}
					}
					k, err := q.GetContext(ctx)
					cancel()
					switch {
					case err == nil:
						process(k)
					case errors.Is(err, workqueue.ErrShutDown):
						return
					default:
						ctxErrs.Add(1)
					}
				}
			})
		}

		// The run is cut into epochs, each ending when the producers are
		// done and every worker is idle. An epoch's end is where a lost add
		// shows: the key's last version was never read. Every epoch gives
		// each key a fresh chance for its last add to land while it is
		// processing, which is the case a lost update needs.
		for epoch := range epochs {
			var ps sync.WaitGroup
			for p := range producers {
				ps.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(p), uint64(epoch)))
					for range addsPerProducer / epochs {
						k := rng.IntN(keys)
						version[k].Add(1)
						q.Add(k)
						if rng.IntN(4) == 0 {
							// Let the workers run, so that adds meet
							// keys in every state, not only ready ones.
							runtime.Gosched()
						}
					}
				})
			}
			ps.Wait()
			synctest.Wait() // every worker idle in Get, the canceller idle

			require.Zero(t, overlaps.Load(), "epoch %d: a key must never be processed by two workers at once", epoch)
			require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()),
				"epoch %d: with producers done and every worker idle, no key may be ready or processing (a ready key next to idle getters is a lost wake-up)", epoch)
			for k := range keys {
				require.Equal(t, version[k].Load(), seen[k].Load(),
					"epoch %d, key %d: its last Add (version %d) must be seen by a processing that started after it", epoch, k, version[k].Load())
			}
		}
		total := int64(producers * addsPerProducer)
		require.LessOrEqual(t, runs.Load(), total, "a key is never processed more often than it is added")
		t.Logf("%d adds, %d runs, %d GetContext calls ended by cancellation", total, runs.Load(), ctxErrs.Load())

		q.ShutDownWithDrain()
		ws.Wait()
		close(cancels)
		canceller.Wait()
		require.Zero(t, overlaps.Load(), "no overlap during the drain either")
	})
}
