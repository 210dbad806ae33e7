package benchwork

import "testing"

// TestFIFO checks the order through growth and wrap-around, and that a FIFO
// that never empties reuses its slots instead of growing.
func TestFIFO(t *testing.T) {
	var q FIFO[int]
	next, want := 0, 0
	for round := range 100 {
		for range round%7 + 1 {
			q.Push(next)
			next++
		}
		for range round % 5 {
			if q.Len() == 0 {
				break
			}
			if got := q.Pop(); got != want {
				t.Fatalf("popped %d, want %d", got, want)
			}
			want++
		}
	}
	for q.Len() > 0 {
		if got := q.Pop(); got != want {
			t.Fatalf("popped %d, want %d", got, want)
		}
		want++
	}
	if want != next {
		t.Fatalf("popped %d elements, pushed %d", want, next)
	}

	q = FIFO[int]{}
	for range 10 {
		q.Push(0)
	}
	for range 100_000 {
		q.Push(q.Pop())
	}
	if len(q.buf) > 16 {
		t.Fatalf("a FIFO that never holds more than 10 grew to %d slots", len(q.buf))
	}
}
