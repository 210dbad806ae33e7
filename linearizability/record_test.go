package linearizability

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/go-coalesce/workqueue"
)

// config is one way to build the queue under test, with the order its Get
// follows.
type config struct {
	name  string
	order order
	make  func() *workqueue.Queue[int]
}

var configs = []config{
	{"New", order{tenants: 1}, workqueue.New[int]},
	{"FIFOStore", order{tenants: 1, ghosts: true}, func() *workqueue.Queue[int] {
		return workqueue.NewWithConfig(workqueue.Config[int]{Store: workqueue.NewFIFOStore[int]()})
	}},
	{"FairStore", order{tenants: 2, ghosts: true}, func() *workqueue.Queue[int] {
		tenant := func(k int) string { return [...]string{"even", "odd"}[k%2] }
		return workqueue.NewWithConfig(workqueue.Config[int]{Store: workqueue.NewFairStore(tenant)})
	}},
	{"PriorityStore", order{tenants: 1, prio: true}, func() *workqueue.Queue[int] {
		return workqueue.NewWithConfig(workqueue.Config[int]{Store: workqueue.NewPriorityStore[int]()})
	}},
}

// shape is the size of a history and the operations it may use.
type shape struct {
	workers int  // goroutines calling the queue
	ops     int  // operations each worker draws
	remove  bool // draw Remove
}

// record runs one history on a fresh queue built by c: workers goroutines
// draw ops operations each from seed, and one more goroutine calls ShutDown
// once every worker has finished or waits in Get, which ends those Gets;
// in half the histories (drawn from seed) it calls it earlier, after a
// drawn number of calls, so that ShutDown also meets calls in flight.
// Every call is stamped before it starts and after it returns, from one
// counter, so the stamps order the calls as real time does.
func record(c config, sh shape, seed uint64) []porcupine.Operation {
	q := c.make()
	var clock atomic.Int64
	// settled counts workers that have finished or wait in Get, as +1
	// and -1 messages, and each call that returns as a 0; buffered for
	// every message a worker can send, so that no worker waits for the
	// ShutDown goroutine.
	settled := make(chan int, sh.workers*(3*sh.ops+1))
	shutAfter := sh.workers * sh.ops // calls: never, before every worker settles
	if r := rand.New(rand.NewPCG(seed, uint64(sh.workers))); r.IntN(2) == 0 {
		shutAfter = r.IntN(sh.workers * sh.ops)
	}
	histories := make([][]porcupine.Operation, sh.workers+1)
	var wg sync.WaitGroup

	for w := range sh.workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			var held []int8 // keys this worker took and has not marked Done
			do := func(in input, call func() output) output {
				start := clock.Add(1)
				out := call()
				histories[w] = append(histories[w], porcupine.Operation{
					ClientId: w, Input: in, Call: start, Output: out, Return: clock.Add(1),
				})
				settled <- 0
				return out
			}
			for range sh.ops {
				if rng.IntN(4) == 0 {
					runtime.Gosched() // vary the interleavings
				}
				in := draw(rng, c.order, sh, held)
				k := int(in.key)
				switch in.kind {
				case opAdd:
					do(in, func() output { q.Add(k); return output{} })
				case opAddAfter:
					do(in, func() output { q.AddAfter(k, 0); return output{} })
				case opAddPrio:
					do(in, func() output { q.AddWithPriority(k, int(in.prio)); return output{} })
				case opGet:
					settled <- 1
					out := do(in, func() output {
						if c.order.prio {
							item, p, shut := q.GetWithPriority()
							return getOutput(item, p, true, shut, nil)
						}
						item, shut := q.Get()
						return getOutput(item, 0, false, shut, nil)
					})
					settled <- -1
					if out.end == gotKey {
						held = append(held, out.key)
					}
				case opGetCtx:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+rng.IntN(500))*time.Microsecond)
					out := do(in, func() output {
						item, err := q.GetContext(ctx)
						return getOutput(item, 0, false, false, err)
					})
					cancel()
					if out.end == gotKey {
						held = append(held, out.key)
					}
				case opDone:
					if i := slices.Index(held, in.key); i >= 0 {
						held = append(held[:i], held[i+1:]...)
					}
					do(in, func() output { q.Done(k); return output{} })
				case opRemove:
					do(in, func() output { return output{ok: q.Remove(k)} })
				case opLen:
					do(in, func() output { return output{n: q.Len()} })
				}
			}
			settled <- 1
		})
	}
	wg.Go(func() {
		for n, calls := 0, 0; n < sh.workers && calls < shutAfter; {
			switch d := <-settled; d {
			case 0:
				calls++
			default:
				n += d
			}
		}
		start := clock.Add(1)
		q.ShutDown()
		histories[sh.workers] = []porcupine.Operation{{
			ClientId: sh.workers, Input: input{kind: opShutDown}, Call: start, Output: output{}, Return: clock.Add(1),
		}}
	})
	wg.Wait()

	var ops []porcupine.Operation
	for _, h := range histories {
		ops = append(ops, h...)
	}
	return ops
}

func getOutput(item, prio int, hasPrio, shut bool, err error) output {
	switch {
	case errors.Is(err, workqueue.ErrShutDown) || shut:
		return output{key: -1, end: endShutDown}
	case err != nil:
		return output{key: -1, end: endCtx}
	}
	return output{key: int8(item), prio: int8(prio), hasPrio: hasPrio}
}

// draw picks a worker's next operation. Done goes mostly to a key the
// worker holds (the protocol's use), sometimes to any key (a stray Done).
func draw(rng *rand.Rand, o order, sh shape, held []int8) input {
	key := int8(rng.IntN(nKeys))
	for {
		switch r := rng.IntN(100); {
		case r < 22:
			if o.prio && rng.IntN(2) == 0 {
				return input{kind: opAddPrio, key: key, prio: int8(rng.IntN(3) - 1)}
			}
			return input{kind: opAdd, key: key}
		case r < 28:
			return input{kind: opAddAfter, key: key}
		case r < 46:
			return input{kind: opGet}
		case r < 52:
			return input{kind: opGetCtx}
		case r < 72:
			if len(held) > 0 && rng.IntN(8) != 0 {
				key = held[rng.IntN(len(held))]
			}
			return input{kind: opDone, key: key}
		case r < 84:
			if sh.remove {
				return input{kind: opRemove, key: key}
			}
		default:
			return input{kind: opLen}
		}
	}
}
