package linearizability

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// The specification checked against docs/protocol.md by hand, one row or
// ordering rule per case: each case is a sequence of calls, one after the
// other, whose last answer is given right and wrong. The right history must
// pass and the wrong one fail, so the specification is neither looser nor
// stricter than the table at these points.

type call struct {
	in  input
	out output
}

func add(k int8) call             { return call{in: input{kind: opAdd, key: k}} }
func addPrio(k, p int8) call      { return call{in: input{kind: opAddPrio, key: k, prio: p}} }
func get(k int8) call             { return call{input{kind: opGet}, output{key: k}} }
func getPrio(k, p int8) call      { return call{input{kind: opGet}, output{key: k, prio: p, hasPrio: true}} }
func getShut() call               { return call{input{kind: opGet}, output{key: -1, end: endShutDown}} }
func getCtxEnd() call             { return call{input{kind: opGetCtx}, output{key: -1, end: endCtx}} }
func done(k int8) call            { return call{in: input{kind: opDone, key: k}} }
func remove(k int8, ok bool) call { return call{input{kind: opRemove, key: k}, output{ok: ok}} }
func length(n int) call           { return call{input{kind: opLen}, output{n: n}} }
func shutDown() call              { return call{in: input{kind: opShutDown}} }

var (
	fifo     = order{tenants: 1}
	fifoHeld = order{tenants: 1, ghosts: true}
	fair     = order{tenants: 2, ghosts: true}
	prio     = order{tenants: 1, prio: true}
)

var (
	probeGet    = input{kind: opGet}
	probeLen    = input{kind: opLen}
	probeRemove = input{kind: opRemove}
)

var rows = []struct {
	name         string
	order        order
	calls        []call // one after the other, each with its right answer
	probe        input  // the call after them
	right, wrong output // its answer the specification allows, and one it does not
}{
	{"FIFO", fifo, []call{add(0), add(1), add(0)}, probeGet, output{key: 0}, output{key: 1}},
	{"stray Done changes nothing", fifo, []call{add(0), done(0)}, probeLen, output{n: 1}, output{n: 0}},
	{"processing+dirty runs again at the tail", fifo,
		[]call{add(0), get(0), add(0), add(1), length(1), done(0), get(1)}, probeGet, output{key: 0}, output{key: -1, end: endShutDown}},
	{"processing+dirty is not ready", fifo, []call{add(0), get(0), add(0)}, probeLen, output{n: 0}, output{n: 1}},
	{"Done of processing ends the key", fifo, []call{add(0), get(0), done(0)}, probeLen, output{n: 0}, output{n: 1}},
	{"Remove of ready", fifo, []call{add(0)}, probeRemove, output{ok: true}, output{ok: false}},
	{"Remove of absent", fifo, []call{add(1)}, probeRemove, output{ok: false}, output{ok: true}},
	{"Remove of processing", fifo, []call{add(0), get(0)}, probeRemove, output{ok: false}, output{ok: true}},
	{"Remove of processing+dirty", fifo, []call{add(0), get(0), add(0), remove(0, true), done(0)}, probeLen, output{n: 0}, output{n: 1}},
	{"without a Store a removed key comes back at the tail", fifo,
		[]call{add(0), add(1), remove(0, true), add(0)}, probeGet, output{key: 1}, output{key: 0}},
	{"with a Store a removed key comes back at its ghost's place", fifoHeld,
		[]call{add(0), add(1), remove(0, true), add(0)}, probeGet, output{key: 0}, output{key: 1}},
	{"Get passes over a ghost", fifoHeld,
		[]call{add(0), add(1), remove(0, true), get(1), done(1), add(1), add(0)}, probeGet, output{key: 1}, output{key: 0}},
	{"the ghosts are dropped when no live key is left", fifoHeld,
		[]call{add(0), remove(0, true), add(1), add(0)}, probeGet, output{key: 1}, output{key: 0}},
	{"fair store: round-robin across tenants", fair,
		[]call{add(0), add(2), add(1), get(0)}, probeGet, output{key: 1}, output{key: 2}},
	{"fair store: a ghost costs its tenant its turn", fair,
		[]call{add(0), add(2), add(1), add(3), remove(0, true)}, probeGet, output{key: 1}, output{key: 2}},
	{"priority: higher first", prio, []call{addPrio(0, -1), add(1), addPrio(2, 1), getPrio(2, 1)}, probeGet,
		output{key: 1, hasPrio: true}, output{key: 0, prio: -1, hasPrio: true}},
	{"priority: a raise moves the key to the back of its new level", prio,
		[]call{addPrio(0, -1), add(1), add(0)}, probeGet, output{key: 1, hasPrio: true}, output{key: 0, hasPrio: true}},
	{"priority: a lower priority changes nothing", prio,
		[]call{addPrio(0, 1), addPrio(0, -1), add(1)}, probeGet, output{key: 0, prio: 1, hasPrio: true}, output{key: 0, prio: -1, hasPrio: true}},
	{"priority: an equal priority changes nothing", prio,
		[]call{addPrio(0, 1), addPrio(1, 1), addPrio(0, 1)}, probeGet, output{key: 0, prio: 1, hasPrio: true}, output{key: 1, prio: 1, hasPrio: true}},
	{"priority: processing+dirty keeps the highest asked", prio,
		[]call{add(0), getPrio(0, 0), addPrio(0, 1), add(0), add(1), done(0)}, probeGet,
		output{key: 0, prio: 1, hasPrio: true}, output{key: 1, hasPrio: true}},
	{"Get hands out ready keys after ShutDown", fifo,
		[]call{add(0), shutDown(), add(1)}, probeGet, output{key: 0}, output{key: -1, end: endShutDown}},
	{"Add after ShutDown does nothing", fifo,
		[]call{shutDown(), add(0)}, probeGet, output{key: -1, end: endShutDown}, output{key: 0}},
	{"Done after ShutDown still queues a processing+dirty key", fifo,
		[]call{add(0), get(0), add(0), shutDown(), done(0)}, probeGet, output{key: 0}, output{key: -1, end: endShutDown}},
	{"Get does not report shutdown before ShutDown", fifo,
		[]call{add(1), get(1), done(1), add(1)}, probeGet, output{key: 1}, output{key: -1, end: endShutDown}},
	{"Get does not hand out a processing key", fifo,
		[]call{add(0), get(0), add(0), add(1)}, probeGet, output{key: 1}, output{key: 0}},
	{"GetContext's context error takes no key", fifo,
		[]call{add(0), getCtxEnd()}, probeLen, output{n: 1}, output{n: 0}},
}

func TestSpecificationRows(t *testing.T) {
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			model := newModel(r.order)
			for _, c := range []struct {
				out  output
				want bool
			}{{r.right, true}, {r.wrong, false}} {
				calls := append(append([]call(nil), r.calls...), call{r.probe, c.out})
				if r.probe.kind == opRemove {
					calls[len(calls)-1].in.key = 0
				}
				var h []porcupine.Operation
				for i, cl := range calls {
					h = append(h, porcupine.Operation{Input: cl.in, Output: cl.out, Call: int64(2 * i), Return: int64(2*i + 1)})
				}
				if got := porcupine.CheckOperations(model, h); got != c.want {
					t.Errorf("linearizable %t, want %t:\n%s", got, c.want, describeHistory(h))
				}
			}
		})
	}
}
