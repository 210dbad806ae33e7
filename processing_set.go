package workqueue

// The processing flag of a key lives in the key table (key_state.go), and
// so does, while a queue has metrics, the time its run started (its at
// column).
// What is kept here is the rest of the processing set that only metrics
// need: the runs in the order they started, to answer "how long has the
// oldest run been going", and the sum of their start times, to answer "how
// much unfinished work is there". Both are exact at the moment a scrape
// asks, and no goroutine recomputes them on a tick (client-go's does, every
// 500 ms, under the queue lock).
//
// Get appends a record; Done removes it when it is the oldest, which is the
// usual case, and otherwise only counts it as stale: records are not
// searched for on the hot path. Stale records are dropped when they reach
// the front, and all of them at once when they outnumber the live ones, so
// the records stay within twice the processing keys plus a constant.
//
// A queue without metrics never touches it, so its Get and Done stay free of
// clock reads.
type processingSet[T comparable] struct {
	order ring[startRecord[T]] // runs by start time, oldest first; some stale
	stale int                  // records in order whose run has ended
	sum   int64                // sum of the start times of the live runs
	gen   uint16               // generation of the last run started

	// dirtyAt holds, for a processing key that was added again, when that
	// add happened: its next run's queue latency counts from then, as in
	// client-go. Only keys dirtied while processing are in it.
	dirtyAt shrinkingMap[T, int64]
}

// startRecord is one started run. gen tells a key's runs apart: a record is
// live while the key is processing with the same generation. Generations
// count every run of the queue and wrap at 65536; a stale record is dropped
// within (processing keys + 17) Dones, so it cannot meet a run of its key
// with the same generation unless some 65000 keys are processing at once.
type startRecord[T comparable] struct {
	item T
	at   int64
	gen  uint16
}

// start records that a run of item began at now, and returns the run's
// generation for the key table.
func (p *processingSet[T]) start(item T, now int64) uint16 {
	p.gen++
	p.order.Push(startRecord[T]{item, now, p.gen})
	p.sum += now
	return p.gen
}

// finish records that the run of item (generation gen, started at) ended.
// keys is the key table and live the number of runs still going. The
// caller updates keys afterwards.
func (p *processingSet[T]) finish(item T, at int64, gen uint16, keys runs[T], live int) {
	p.sum -= at
	if p.order.Len() > 0 {
		if h := p.order.peek(); h.item == item && h.gen == gen {
			p.order.Pop()
			return
		}
	}
	p.stale++
	if p.stale > live+16 {
		p.compact(item, keys)
	}
}

// compact drops every stale record. ended is the key whose run just ended
// but whose table entry still says processing.
func (p *processingSet[T]) compact(ended T, keys runs[T]) {
	for range p.order.Len() {
		r := p.order.Pop()
		if r.item != ended && isLive(r, keys) {
			p.order.Push(r)
		}
	}
	p.stale = 0
}

func isLive[T comparable](r startRecord[T], keys runs[T]) bool {
	gen, ok := keys.runOf(r.item)
	return ok && gen == r.gen
}

// runs is what the processing set asks the key table: whether item is
// processing, and the generation of its run. The Queue answers from
// whichever table it uses.
type runs[T comparable] interface {
	runOf(item T) (gen uint16, ok bool)
}

// ages returns the sum of the ages of the runs in progress and the age of
// the oldest, at now. live is the number of runs in progress. It drops the
// stale records in front of the oldest live one.
func (p *processingSet[T]) ages(now int64, keys runs[T], live int) (unfinished, longest int64) {
	if live == 0 {
		return 0, 0
	}
	for p.order.Len() > 0 && !isLive(p.order.peek(), keys) {
		p.order.Pop()
		p.stale--
	}
	if p.order.Len() > 0 {
		longest = now - p.order.peek().at
	}
	return int64(live)*now - p.sum, longest
}

// eachLive calls f with the table entry of every key being processed, once
// each: the live records, in start order. entry looks a key up in the
// queue's table. O(records), which is within twice the processing keys
// plus a constant. Only a queue with a priority store asks for it.
func (p *processingSet[T]) eachLive(entry func(T) (keyState, bool), f func(st keyState)) {
	r := &p.order
	for i := range r.n {
		rec := r.buf[(r.head+i)&(len(r.buf)-1)]
		if st, ok := entry(rec.item); ok && st.flags&fProcessing != 0 && st.gen == rec.gen {
			f(st)
		}
	}
}

// dirtied records that processing item was added again at now, unless an
// earlier add already did.
func (p *processingSet[T]) dirtied(item T, now int64) {
	if _, ok := p.dirtyAt.m[item]; !ok {
		p.dirtyAt.put(item, now)
	}
}

// requeued returns when processing item was added again, and forgets it.
func (p *processingSet[T]) requeued(item T) int64 {
	at := p.dirtyAt.m[item]
	p.dirtyAt.del(item)
	return at
}
