package workqueue

import (
	"slices"
	"time"
)

// Temporary stand-in for store38's NewFairPriorityStore (no fairness, no
// MaxWait): removed at merge.
type FairPriority[T comparable] struct {
	Tenant      func(T) string
	Weight      func(tenant string) int
	MaxWait     time.Duration
	MaxInFlight int
}

type stubEntry[T comparable] struct {
	item T
	prio int
}

type stubStore[T comparable] struct {
	cfg   FairPriority[T]
	keys  []stubEntry[T]
	procs map[string]int
}

func NewFairPriorityStore[T comparable](cfg FairPriority[T]) PriorityStore[T] {
	return &stubStore[T]{cfg: cfg, procs: map[string]int{}}
}

func (s *stubStore[T]) tenant(item T) string {
	if s.cfg.Tenant == nil {
		return ""
	}
	return s.cfg.Tenant(item)
}
func (s *stubStore[T]) capped(item T) bool {
	return s.cfg.MaxInFlight > 0 && s.procs[s.tenant(item)] >= s.cfg.MaxInFlight
}
func (s *stubStore[T]) Push(item T) { s.PushPriority(item, 0) }
func (s *stubStore[T]) PushPriority(item T, prio int) {
	s.keys = append(s.keys, stubEntry[T]{item, prio})
}
func (s *stubStore[T]) Len() int { return len(s.keys) }
func (s *stubStore[T]) Touch(T)  {}
func (s *stubStore[T]) Raise(item T, prio int) {
	s.remove(item)
	s.PushPriority(item, prio)
}
func (s *stubStore[T]) Pop() T {
	best := -1
	for i, e := range s.keys {
		if !s.capped(e.item) && (best < 0 || e.prio > s.keys[best].prio) {
			best = i
		}
	}
	e := s.keys[best]
	s.keys = slices.Delete(s.keys, best, best+1)
	return e.item
}
func (s *stubStore[T]) available() int {
	n := 0
	for _, e := range s.keys {
		if !s.capped(e.item) {
			n++
		}
	}
	return n
}
func (s *stubStore[T]) handedOut(item T) { s.procs[s.tenant(item)]++ }
func (s *stubStore[T]) finished(item T) int {
	t := s.tenant(item)
	was := s.capped(item)
	s.procs[t]--
	if !was {
		return 0
	}
	n := 0
	for _, e := range s.keys {
		if s.tenant(e.item) == t {
			n++
		}
	}
	return min(n, 1)
}
func (s *stubStore[T]) remove(item T) {
	s.keys = slices.DeleteFunc(s.keys, func(e stubEntry[T]) bool { return e.item == item })
}
