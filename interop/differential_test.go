package interop

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
	clientworkqueue "k8s.io/client-go/util/workqueue"
)

// The differential tests drive our queue and client-go's with the same
// random sequence of correct calls (the protocol as a controller uses it:
// Get only when a key is ready or the queue is shut down, Done only of a key
// that Get handed out) and require the same answer from both at every step.
// Where the libraries deliberately differ, differences_test.go shows both
// behaviours side by side; the generators here stay out of those corners.

// pair is the part of both queues that the differential tests drive.
type pair interface {
	Add(string)
	AddAfter(string, time.Duration)
	Get() (string, bool)
	Done(string)
	Len() int
	ShutDown()
	ShuttingDown() bool
}

var (
	_ pair = (*workqueue.Queue[string])(nil)
	_ pair = clientworkqueue.TypedDelayingInterface[string](nil)
)

// seeds returns how many random sequences to try: fewer under -short.
func seeds(full int) int {
	if testing.Short() {
		return full / 10
	}
	return full
}

// step records one operation and the answers it got, for failure messages.
type step struct {
	op     string
	ours   string
	theirs string
}

func trace(steps []step) string {
	var s string
	for i, st := range steps {
		s += fmt.Sprintf("%3d %-22s ours=%-22s client-go=%s\n", i, st.op, st.ours, st.theirs)
	}
	return s
}

// TestDifferentialNoDelay compares the plain queues: our New against
// client-go's NewTyped, on Add, AddAfter(d <= 0), Get, Done, Len, ShutDown
// and ShuttingDown.
func TestDifferentialNoDelay(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(10 * time.Second) // bound the run on slow machines
	n := seeds(2000)
	for seed := range uint64(n) {
		if time.Now().After(deadline) {
			t.Logf("stopped after %d of %d seeds: time bound reached", seed, n)
			break
		}
		runNoDelay(t, seed)
		if t.Failed() {
			return
		}
	}
}

func runNoDelay(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	ours := workqueue.New[string]()
	theirs := clientworkqueue.NewTyped[string]()
	defer theirs.ShutDown()

	nkeys := 1 + rng.IntN(8)
	var processing []string // keys handed out by Get and not yet Done
	var steps []step
	check := func(op, o, c string) {
		steps = append(steps, step{op, o, c})
		if o != c {
			require.Failf(t, "answers differ", "seed %d: step %d (%s): ours %q, client-go %q\n%s", seed, len(steps)-1, op, o, c, trace(steps))
		}
	}
	shut := false
	for range 50 + rng.IntN(250) {
		key := "ns/k" + strconv.Itoa(rng.IntN(nkeys))
		switch r := rng.IntN(100); {
		case r < 40:
			ours.Add(key)
			theirs.Add(key)
			check("Add("+key+")", "", "")
		case r < 45:
			d := -time.Duration(rng.IntN(2)) // 0 or -1ns: both mean Add
			ours.AddAfter(key, d)
			theirs.Add(key) // NewTyped has no AddAfter; d <= 0 is Add by contract
			check(fmt.Sprintf("AddAfter(%s,%v)", key, d), "", "")
		case r < 75:
			// Get only when it cannot block: a key is ready, or the
			// queue is shut down.
			lo, lc := ours.Len(), theirs.Len()
			check("Len", strconv.Itoa(lo), strconv.Itoa(lc))
			if lo == 0 && !shut {
				continue
			}
			ko, so := ours.Get()
			kc, sc := theirs.Get()
			check("Get", fmt.Sprintf("%q,%v", ko, so), fmt.Sprintf("%q,%v", kc, sc))
			if !so {
				processing = append(processing, ko)
			}
		case r < 97:
			if len(processing) == 0 {
				continue
			}
			i := rng.IntN(len(processing))
			k := processing[i]
			processing = slices.Delete(processing, i, i+1)
			ours.Done(k)
			theirs.Done(k)
			check("Done("+k+")", "", "")
		default:
			ours.ShutDown()
			theirs.ShutDown()
			shut = true
			check("ShutDown", "", "")
		}
		check("Len", strconv.Itoa(ours.Len()), strconv.Itoa(theirs.Len()))
		check("ShuttingDown", fmt.Sprint(ours.ShuttingDown()), fmt.Sprint(theirs.ShuttingDown()))
		if p := ours.Stats().Processing; p != len(processing) {
			require.Failf(t, "processing count", "seed %d: Stats().Processing = %d, want %d\n%s", seed, p, len(processing), trace(steps))
		}
	}
	// Finish: shut both down and drain; every answer must still agree.
	ours.ShutDown()
	theirs.ShutDown()
	for {
		for _, k := range processing {
			ours.Done(k)
			theirs.Done(k)
			check("Done("+k+")", "", "")
		}
		processing = processing[:0]
		ko, so := ours.Get()
		kc, sc := theirs.Get()
		check("Get", fmt.Sprintf("%q,%v", ko, so), fmt.Sprintf("%q,%v", kc, sc))
		if so || sc {
			break
		}
		processing = append(processing, ko)
	}
}

// TestDifferentialDelayed compares the delaying queues inside a synctest
// bubble: our Queue against client-go's NewTypedDelayingQueue, with AddAfter
// and the passage of (fake) time added to the operations.
//
// client-go's delaying queue reads time through clock.RealClock, that is
// time.Now and time.NewTimer; inside a bubble those are the bubble's fake
// clock, so both queues see the same instants. Its waiting loop goroutine is
// started in the bubble and ends at ShutDown, which the bubble requires.
//
// The generator keeps to the cases where the two libraries agree: Add is not
// called for a key that is waiting (client-go would run it twice,
// kubernetes#126027), and AddAfter is not called for a key that is already
// due (client-go would run it once more at the deadline). Deadlines are kept
// distinct, because client-go's heap orders equal deadlines arbitrarily.
func TestDifferentialDelayed(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(10 * time.Second)
	n := seeds(500)
	for seed := range uint64(n) {
		if time.Now().After(deadline) {
			t.Logf("stopped after %d of %d seeds: time bound reached", seed, n)
			break
		}
		synctest.Test(t, func(t *testing.T) { runDelayed(t, seed) })
		if t.Failed() {
			return
		}
	}
}

func runDelayed(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d))
	ours := workqueue.New[string]()
	theirs := clientworkqueue.NewTypedDelayingQueue[string]()
	defer ours.ShutDown()
	defer theirs.ShutDown()

	start := time.Now()
	nkeys := 1 + rng.IntN(8)
	// The model: only what the generator needs to stay on common ground.
	waiting := map[string]time.Time{} // key -> deadline
	dirty := map[string]bool{}        // due now: ready, or processing and due again
	var processing []string
	shut := false
	var steps []step
	check := func(op, o, c string) {
		steps = append(steps, step{op, o, c})
		if o != c {
			require.Failf(t, "answers differ", "seed %d: step %d (%s): ours %q, client-go %q\n%s", seed, len(steps)-1, op, o, c, trace(steps))
		}
	}
	counter := 0 // gives every AddAfter a distinct sub-millisecond offset
	for range 50 + rng.IntN(200) {
		key := "ns/k" + strconv.Itoa(rng.IntN(nkeys))
		now := time.Now()
		switch r := rng.IntN(100); {
		case r < 25:
			if _, ok := waiting[key]; ok {
				continue // client-go would keep the heap entry: a second run
			}
			ours.Add(key)
			theirs.Add(key)
			if !shut {
				dirty[key] = true
			}
			check("Add("+key+")", "", "")
		case r < 45:
			if dirty[key] {
				continue // client-go would run it again at the deadline
			}
			counter++
			d := time.Duration(1+rng.IntN(20))*time.Millisecond + time.Duration(counter)*time.Microsecond
			ours.AddAfter(key, d)
			theirs.AddAfter(key, d)
			if !shut {
				if w, ok := waiting[key]; !ok || now.Add(d).Before(w) {
					waiting[key] = now.Add(d)
				}
			}
			check(fmt.Sprintf("AddAfter(%s,%v)", key, d), "", "")
		case r < 60:
			d := time.Duration(rng.IntN(8)) * time.Millisecond
			time.Sleep(d)
			synctest.Wait() // let client-go's waiting loop and our timer finish
			now = time.Now()
			for k, w := range waiting {
				if !w.After(now) {
					delete(waiting, k)
					dirty[k] = true
				}
			}
			check(fmt.Sprintf("Sleep(%v) t=%v", d, now.Sub(start)), "", "")
		case r < 80:
			lo, lc := ours.Len(), theirs.Len()
			check("Len", strconv.Itoa(lo), strconv.Itoa(lc))
			if lo == 0 && !shut {
				continue
			}
			ko, so := ours.Get()
			kc, sc := theirs.Get()
			check("Get", fmt.Sprintf("%q,%v", ko, so), fmt.Sprintf("%q,%v", kc, sc))
			if !so {
				processing = append(processing, ko)
				delete(dirty, ko)
			}
		case r < 98:
			if len(processing) == 0 {
				continue
			}
			i := rng.IntN(len(processing))
			k := processing[i]
			processing = slices.Delete(processing, i, i+1)
			ours.Done(k)
			theirs.Done(k)
			check("Done("+k+")", "", "")
		default:
			ours.ShutDown()
			theirs.ShutDown()
			synctest.Wait()
			shut = true
			clear(waiting)
			check("ShutDown", "", "")
		}
		check("Len", strconv.Itoa(ours.Len()), strconv.Itoa(theirs.Len()))
		check("ShuttingDown", fmt.Sprint(ours.ShuttingDown()), fmt.Sprint(theirs.ShuttingDown()))
		st := ours.Stats()
		if st.Processing != len(processing) || st.Waiting != len(waiting) {
			require.Failf(t, "counts", "seed %d: Stats() = %+v, want Processing %d, Waiting %d\n%s", seed, st, len(processing), len(waiting), trace(steps))
		}
	}
	// Let every deadline pass, then drain both and compare to the end.
	time.Sleep(time.Second)
	synctest.Wait()
	check("Sleep(1s)", "", "")
	ours.ShutDown()
	theirs.ShutDown()
	synctest.Wait()
	for {
		for _, k := range processing {
			ours.Done(k)
			theirs.Done(k)
			check("Done("+k+")", "", "")
		}
		processing = processing[:0]
		ko, so := ours.Get()
		kc, sc := theirs.Get()
		check("Get", fmt.Sprintf("%q,%v", ko, so), fmt.Sprintf("%q,%v", kc, sc))
		if so || sc {
			break
		}
		processing = append(processing, ko)
	}
}
