package workqueue

import "fmt"

// RaceBuild exposes raceBuild (delay_test.go) to the tests of package
// workqueue_test, so both packages size their largest tests the same way.
var RaceBuild = raceBuild

// CheckTable returns an error if q's key table breaks an invariant that the
// ghost column relies on (remove.go): the index holds exactly the entries
// that have flags, every fGhost entry holds ghosts and no other flag, no
// dead entry holds a ghost, no key more than one and a ready key none (the
// store holds one entry per key), and the column adds up to q's ghost count. It
// also reports the entries the table holds (keys and fGhost entries), which
// is 0 once a drained queue forgot every key and every ghost.
func CheckTable[T comparable](q *Queue[T]) (entries int, err error) {
	q.lock()
	defer q.mu.Unlock()
	t := &q.tab
	occupied := 0
	for _, e := range t.index {
		if e != 0 {
			occupied++
			if p := int(uint32(e)) - 1; p >= t.tail || t.flags[p] == 0 {
				return 0, fmt.Errorf("index slot points at dead entry %d", p)
			}
		}
	}
	ghosts := 0
	for p := range t.tail {
		f := t.flags[p]
		if f != 0 {
			entries++
		}
		g := 0
		if t.ghosted {
			g = int(t.ghost[p])
		}
		ghosts += g
		switch {
		case f == 0 && g != 0:
			return 0, fmt.Errorf("dead entry %d holds %d ghosts", p, g)
		case f&fGhost != 0 && (f != fGhost || g == 0):
			return 0, fmt.Errorf("entry %d of %v: flags %b with %d ghosts", p, t.keys[p], f, g)
		case g > 1 || g > 0 && f&fDirty != 0 && f&fProcessing == 0:
			// The store holds one entry per key: a key has at most one
			// ghost, and a ready key none (its entry is live).
			return 0, fmt.Errorf("entry %d of %v: flags %b with %d ghosts in the store", p, t.keys[p], f, g)
		}
	}
	if t.ghosted {
		for p := t.tail; p < len(t.ghost); p++ {
			if t.ghost[p] != 0 {
				return 0, fmt.Errorf("unused entry %d past the tail holds %d ghosts", p, t.ghost[p])
			}
		}
	}
	if occupied != t.live || entries != t.live {
		return 0, fmt.Errorf("live %d, index slots %d, entries %d", t.live, occupied, entries)
	}
	if ghosts != q.ghosts {
		return 0, fmt.Errorf("ghost column adds up to %d, queue counts %d", ghosts, q.ghosts)
	}
	return entries, nil
}
