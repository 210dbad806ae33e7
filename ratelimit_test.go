package workqueue

// These tests live inside the package so that they can check that a
// limiter's failure map is really replaced after a burst; everything else
// uses only the exported API.

import (
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// whenSeq calls l.When(item) n times and returns the delays.
func whenSeq[T comparable](l RateLimiter[T], item T, n int) []time.Duration {
	ds := make([]time.Duration, n)
	for i := range ds {
		ds[i] = l.When(item)
	}
	return ds
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// TestItemExponentialFailureRateLimiterDelays pins the delays that
// client-go's TypedItemExponentialFailureRateLimiter returns for the same
// arguments: base*2^n after the n-th failure, capped at max.
func TestItemExponentialFailureRateLimiterDelays(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		base, max time.Duration
		want      []time.Duration
	}{
		{
			name: "1ms to 1s",
			base: ms(1), max: time.Second,
			want: []time.Duration{ms(1), ms(2), ms(4), ms(8), ms(16), ms(32), ms(64), ms(128), ms(256), ms(512), time.Second, time.Second},
		},
		{
			name: "controller default 5ms to 1000s",
			base: ms(5), max: 1000 * time.Second,
			want: []time.Duration{
				ms(5), ms(10), ms(20), ms(40), ms(80), ms(160), ms(320), ms(640), ms(1280), ms(2560),
				ms(5120), ms(10240), ms(20480), ms(40960), ms(81920), ms(163840), ms(327680), ms(655360),
				1000 * time.Second, 1000 * time.Second,
			},
		},
		{
			name: "max not a power-of-two multiple",
			base: ms(3), max: ms(20),
			want: []time.Duration{ms(3), ms(6), ms(12), ms(20), ms(20)},
		},
		{name: "base equals max", base: time.Second, max: time.Second, want: []time.Duration{time.Second, time.Second}},
		{name: "base above max", base: time.Minute, max: time.Second, want: []time.Duration{time.Second, time.Second}},
		{name: "zero base", base: 0, max: time.Second, want: []time.Duration{0, 0, 0}},
		{name: "zero max", base: time.Second, max: 0, want: []time.Duration{0, 0, 0}},
		// client-go returns these negative values; a delaying queue treats
		// them as zero, and so do we, at the source.
		{name: "negative base", base: -time.Second, max: time.Second, want: []time.Duration{0, 0, 0}},
		{name: "negative max", base: time.Second, max: -time.Second, want: []time.Duration{0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := NewItemExponentialFailureRateLimiter[string](tt.base, tt.max)
			for i, want := range tt.want {
				require.Equal(t, want, l.When("a"), "delay after failure %d", i)
				require.Equal(t, i+1, l.NumRequeues("a"), "NumRequeues counts every When")
			}
		})
	}
}

// TestItemExponentialFailureRateLimiterForget checks that keys are counted
// separately and that Forget starts a key over at base.
func TestItemExponentialFailureRateLimiterForget(t *testing.T) {
	t.Parallel()
	l := NewItemExponentialFailureRateLimiter[string](ms(1), time.Second)
	require.Equal(t, 0, l.NumRequeues("a"), "an unknown key has no failures")

	require.Equal(t, []time.Duration{ms(1), ms(2), ms(4)}, whenSeq[string](l, "a", 3))
	require.Equal(t, ms(1), l.When("b"), "keys back off independently")
	require.Equal(t, 3, l.NumRequeues("a"))
	require.Equal(t, 1, l.NumRequeues("b"))

	l.Forget("a")
	require.Equal(t, 0, l.NumRequeues("a"), "Forget resets the count")
	require.Equal(t, 1, l.NumRequeues("b"), "Forget touches only its key")
	require.Equal(t, ms(1), l.When("a"), "after Forget the delay starts over at base")

	l.Forget("never seen") // must not panic or disturb others
	require.Equal(t, 1, l.NumRequeues("a"))
	require.Len(t, l.failures.m.m, 2, "Forget of an unknown key adds nothing")
	l.Forget("a")
	l.Forget("b")
	require.Zero(t, len(l.failures.m.m), "Forget removes the entries")
}

// exponentialReference returns what client-go's exponential limiter returns
// after failure n where that is a valid delay (float64(base)*2^n below
// 2^63ns, then capped), and max where client-go would convert an
// out-of-range float. It uses exact big-integer arithmetic, independently of
// the float64 math of the implementation.
func exponentialReference(base, maxDelay time.Duration, n int) time.Duration {
	base, maxDelay = max(base, 0), max(maxDelay, 0)
	if base == 0 || maxDelay == 0 {
		return 0
	}
	// float64(base) is an integer; client-go rounds base to it first.
	b, _ := big.NewFloat(float64(base)).Int(nil)
	if n > 200 {
		return maxDelay // far past 2^63 for any base >= 1
	}
	b.Lsh(b, uint(n))
	if b.Cmp(new(big.Int).Lsh(big.NewInt(1), 63)) >= 0 {
		return maxDelay
	}
	return min(time.Duration(b.Int64()), maxDelay)
}

// TestItemExponentialFailureRateLimiterNoOverflow drives the limiter far past
// the point where base*2^n leaves int64, with bases near math.MaxInt64 and
// with zero and negative arguments: every delay stays within [0, max], never
// decreases, and matches exact big-integer arithmetic.
func TestItemExponentialFailureRateLimiterNoOverflow(t *testing.T) {
	t.Parallel()
	const failures = 2100 // past 1024, where 2^n overflows float64 to +Inf
	tests := []struct {
		name      string
		base, max time.Duration
	}{
		{"1ns to MaxInt64", 1, math.MaxInt64},
		{"MaxInt64/2 to MaxInt64", math.MaxInt64 / 2, math.MaxInt64},
		{"MaxInt64 to MaxInt64", math.MaxInt64, math.MaxInt64},
		{"MaxInt64 to 1s", math.MaxInt64, time.Second},
		{"2^62 to MaxInt64", 1 << 62, math.MaxInt64},
		{"2^53+1 to MaxInt64", 1<<53 + 1, math.MaxInt64},
		{"5ms to 1000s", ms(5), 1000 * time.Second},
		{"1h to MaxInt64", time.Hour, math.MaxInt64},
		{"zero base", 0, math.MaxInt64},
		{"MinInt64 base", math.MinInt64, math.MaxInt64},
		{"MinInt64 max", time.Second, math.MinInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := NewItemExponentialFailureRateLimiter[int](tt.base, tt.max)
			capDelay := max(tt.max, 0)
			prev := time.Duration(0)
			for n := range failures {
				d := l.When(1)
				require.GreaterOrEqual(t, d, prev, "delay after failure %d must not decrease", n)
				require.LessOrEqual(t, d, capDelay, "delay after failure %d must not pass max", n)
				require.Equal(t, exponentialReference(tt.base, tt.max, n), d, "delay after failure %d", n)
				prev = d
			}
			require.Equal(t, failures, l.NumRequeues(1))
		})
	}

	t.Run("exact values at the edge of int64", func(t *testing.T) {
		t.Parallel()
		l := NewItemExponentialFailureRateLimiter[int](1, math.MaxInt64)
		ds := whenSeq[int](l, 1, 65)
		require.Equal(t, time.Duration(1<<62), ds[62], "2^62ns still fits")
		require.Equal(t, time.Duration(math.MaxInt64), ds[63], "2^63ns does not fit: max (client-go returns MinInt64 here)")
		require.Equal(t, time.Duration(math.MaxInt64), ds[64])

		// float64(MaxInt64/2) rounds up to 2^62, as in client-go.
		l = NewItemExponentialFailureRateLimiter[int](math.MaxInt64/2, math.MaxInt64)
		require.Equal(t, []time.Duration{1 << 62, math.MaxInt64, math.MaxInt64}, whenSeq[int](l, 1, 3))
	})
}

// TestItemLimitersSaturateCount checks that a failure count at math.MaxInt
// stays there instead of wrapping to a negative count and a short delay.
func TestItemLimitersSaturateCount(t *testing.T) {
	t.Parallel()
	e := NewItemExponentialFailureRateLimiter[string](ms(1), time.Second)
	e.failures.m.put("a", math.MaxInt-1)
	require.Equal(t, time.Second, e.When("a"))
	require.Equal(t, time.Second, e.When("a"))
	require.Equal(t, math.MaxInt, e.NumRequeues("a"), "the count saturates")

	f := NewItemFastSlowRateLimiter[string](ms(1), time.Second, 3)
	f.failures.m.put("a", math.MaxInt-1)
	require.Equal(t, time.Second, f.When("a"))
	require.Equal(t, time.Second, f.When("a"), "a saturated count stays slow")
	require.Equal(t, math.MaxInt, f.NumRequeues("a"), "the count saturates")
}

// TestItemFastSlowRateLimiter pins client-go's fast-slow sequence and the
// meaning of zero and negative arguments.
func TestItemFastSlowRateLimiter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		fast, slow time.Duration
		maxFast    int
		want       []time.Duration
	}{
		{"3 fast then slow", ms(5), 10 * time.Second, 3, []time.Duration{ms(5), ms(5), ms(5), 10 * time.Second, 10 * time.Second}},
		{"1 fast", ms(5), time.Second, 1, []time.Duration{ms(5), time.Second, time.Second}},
		{"no fast", ms(5), time.Second, 0, []time.Duration{time.Second, time.Second}},
		{"negative maxFast", ms(5), time.Second, -1, []time.Duration{time.Second, time.Second}},
		{"slow shorter than fast", time.Second, ms(5), 1, []time.Duration{time.Second, ms(5)}},
		{"negative fast", -time.Second, time.Second, 1, []time.Duration{0, time.Second}},
		{"negative slow", time.Second, math.MinInt64, 1, []time.Duration{time.Second, 0}},
		{"huge", math.MaxInt64, math.MaxInt64, 1, []time.Duration{math.MaxInt64, math.MaxInt64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := NewItemFastSlowRateLimiter[string](tt.fast, tt.slow, tt.maxFast)
			for i, want := range tt.want {
				require.Equal(t, want, l.When("a"), "delay after failure %d", i)
				require.Equal(t, i+1, l.NumRequeues("a"), "NumRequeues counts every When")
			}
		})
	}

	t.Run("forget", func(t *testing.T) {
		t.Parallel()
		l := NewItemFastSlowRateLimiter[string](ms(5), time.Second, 2)
		require.Equal(t, []time.Duration{ms(5), ms(5), time.Second}, whenSeq[string](l, "a", 3))
		require.Equal(t, ms(5), l.When("b"), "keys are counted separately")
		l.Forget("a")
		require.Equal(t, 0, l.NumRequeues("a"), "Forget resets the count")
		require.Equal(t, 1, l.NumRequeues("b"), "Forget touches only its key")
		require.Equal(t, ms(5), l.When("a"), "after Forget the key is fast again")
	})
}

// TestBucketRateLimiter checks the bucket in fake time: the burst is free,
// then tries are spaced 1/limit apart, and tokens refill as time passes.
func TestBucketRateLimiter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := NewBucketRateLimiter[string](rate.NewLimiter(10, 3))
		require.Equal(t,
			[]time.Duration{0, 0, 0, ms(100), ms(200), ms(300)},
			whenDistinct(l, 6),
			"a burst of 3 is free, then one try per 100ms, for any keys")
		require.Equal(t, 0, l.NumRequeues("a"), "the bucket tracks no key")
		l.Forget("a") // a no-op

		time.Sleep(ms(300)) // the 3 reservations come due
		require.Equal(t, ms(100), l.When("a"), "the bucket is empty, not in debt")
		time.Sleep(time.Hour)
		require.Equal(t, []time.Duration{0, 0, 0, ms(100)}, whenSeq[string](l, "a", 4),
			"an idle bucket refills to its burst, no further")
	})
}

// whenDistinct calls l.When once for each of n new keys and returns the
// delays.
func whenDistinct(l RateLimiter[string], n int) []time.Duration {
	ds := make([]time.Duration, n)
	for i := range ds {
		ds[i] = l.When(fmt.Sprint("distinct", i))
	}
	return ds
}

// TestBucketRateLimiterEdges covers buckets that never or always grant.
func TestBucketRateLimiterEdges(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := NewBucketRateLimiter[int](rate.NewLimiter(rate.Inf, 0))
		require.Equal(t, []time.Duration{0, 0, 0}, whenSeq[int](l, 1, 3), "an infinite rate never delays")

		// A bucket that can never hold a token: client-go returns
		// rate.InfDuration too. It is large, but never negative.
		l = NewBucketRateLimiter[int](rate.NewLimiter(10, 0))
		require.Equal(t, rate.InfDuration, l.When(1), "burst 0 never grants")

		l = NewBucketRateLimiter[int](rate.NewLimiter(0, 1))
		require.Equal(t, time.Duration(0), l.When(1), "the one token of the burst is free")
		d := l.When(1)
		require.GreaterOrEqual(t, d, time.Duration(0), "a zero rate never refills, yet the delay is not negative")
		require.Greater(t, d, 100*365*24*time.Hour, "a zero rate never refills")
	})
}

// TestMaxOfRateLimiter checks the worst-of combination as client-go does it.
func TestMaxOfRateLimiter(t *testing.T) {
	t.Parallel()
	// client-go's own case: fast-slow 5ms/3s/3 with exponential 1ms/1s.
	l := NewMaxOfRateLimiter(
		RateLimiter[string](NewItemFastSlowRateLimiter[string](ms(5), 3*time.Second, 3)),
		NewItemExponentialFailureRateLimiter[string](ms(1), time.Second),
	)
	require.Equal(t, []time.Duration{ms(5), ms(5), ms(5), 3 * time.Second, 3 * time.Second}, whenSeq[string](l, "a", 5))
	require.Equal(t, 5, l.NumRequeues("a"), "the largest count of the parts")
	l.Forget("a")
	require.Equal(t, 0, l.NumRequeues("a"), "Forget reaches every part")
	require.Equal(t, ms(5), l.When("a"))

	// Exponential wins once it grows past the fast-slow delays.
	l = NewMaxOfRateLimiter[string](
		NewItemFastSlowRateLimiter[string](ms(3), ms(10), 2),
		NewItemExponentialFailureRateLimiter[string](ms(1), time.Second),
	)
	require.Equal(t, []time.Duration{ms(3), ms(3), ms(10), ms(10), ms(16), ms(32)}, whenSeq[string](l, "a", 6))

	// Different counts: NumRequeues is the maximum, not the sum.
	a := NewItemExponentialFailureRateLimiter[string](ms(1), time.Second)
	b := NewItemExponentialFailureRateLimiter[string](ms(1), time.Second)
	a.When("k")
	a.When("k")
	b.When("k")
	require.Equal(t, 2, NewMaxOfRateLimiter[string](a, b).NumRequeues("k"))
	require.Equal(t, 2, NewMaxOfRateLimiter[string](b, a).NumRequeues("k"))

	empty := NewMaxOfRateLimiter[string]()
	require.Equal(t, time.Duration(0), empty.When("a"), "no limiters: no delay")
	require.Equal(t, 0, empty.NumRequeues("a"))
	empty.Forget("a")

	neg := NewMaxOfRateLimiter[string](fixedLimiter(-time.Second))
	require.Equal(t, time.Duration(0), neg.When("a"), "a negative part never makes the result negative")
}

// TestMaxOfRateLimiterAsksEveryLimiter checks that every part's When runs on
// every call: a bucket spends a token even when another part's delay wins.
func TestMaxOfRateLimiterAsksEveryLimiter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		bucket := rate.NewLimiter(1, 2)
		l := NewMaxOfRateLimiter(
			RateLimiter[string](NewItemExponentialFailureRateLimiter[string](time.Hour, time.Hour)),
			NewBucketRateLimiter[string](bucket),
		)
		require.Equal(t, time.Hour, l.When("a"))
		require.Equal(t, time.Hour, l.When("b"))
		require.Equal(t, time.Hour, l.When("c"), "exponential hides the bucket's 1s")
		require.InDelta(t, -1, bucket.Tokens(), 1e-9, "three tokens were spent from a burst of 2")
	})

	ls := []RateLimiter[string]{fixedLimiter(time.Second)}
	l := NewMaxOfRateLimiter(ls...)
	ls[0] = fixedLimiter(time.Hour)
	require.Equal(t, time.Second, l.When("a"), "the constructor copies its arguments")
}

// fixedLimiter always returns its own value and tracks nothing.
type fixedLimiter time.Duration

func (f fixedLimiter) When(string) time.Duration { return time.Duration(f) }
func (f fixedLimiter) Forget(string)             {}
func (f fixedLimiter) NumRequeues(string) int    { return 0 }

// TestWithMaxWaitRateLimiter checks the cap and the pass-through methods.
func TestWithMaxWaitRateLimiter(t *testing.T) {
	t.Parallel()
	inner := NewItemExponentialFailureRateLimiter[string](time.Second, time.Hour)
	l := NewWithMaxWaitRateLimiter[string](inner, 5*time.Second)
	require.Equal(t,
		[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second},
		whenSeq[string](l, "a", 5))
	require.Equal(t, 5, l.NumRequeues("a"), "NumRequeues passes through")
	require.Equal(t, 5, inner.NumRequeues("a"), "the wrapped limiter counted every failure, capped or not")
	l.Forget("a")
	require.Equal(t, 0, inner.NumRequeues("a"), "Forget passes through")
	require.Equal(t, time.Second, l.When("a"))

	tests := []struct {
		name       string
		inner, max time.Duration
		want       time.Duration
	}{
		{"below cap", time.Second, time.Minute, time.Second},
		{"at cap", time.Minute, time.Minute, time.Minute},
		{"above cap", time.Hour, time.Minute, time.Minute},
		{"zero cap", time.Hour, 0, 0},
		{"negative cap", time.Hour, -time.Minute, 0},
		{"negative inner", -time.Hour, time.Minute, 0},
		{"huge", math.MaxInt64, math.MaxInt64, math.MaxInt64},
	}
	for _, tt := range tests {
		l := NewWithMaxWaitRateLimiter[string](fixedLimiter(tt.inner), tt.max)
		require.Equal(t, tt.want, l.When("a"), tt.name)
	}
}

// TestDefaultControllerRateLimiter checks client-go's default numbers: 5ms
// doubling per key, and one shared bucket of 100 then 10 per second.
func TestDefaultControllerRateLimiter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := DefaultControllerRateLimiter[int]()
		for k := range 100 {
			require.Equal(t, ms(5), l.When(k), "key %d: inside the burst the per-key backoff rules", k)
		}
		require.Equal(t, ms(100), l.When(100), "the burst is spent: the bucket rules")
		require.Equal(t, ms(200), l.When(101))
		require.Equal(t, 1, l.NumRequeues(0))
		require.Equal(t, 0, l.NumRequeues(1000))

		time.Sleep(time.Hour) // refill
		require.Equal(t, []time.Duration{ms(10), ms(20), ms(40)}, whenSeq(l, 0, 3), "one key backs off alone")
		l.Forget(0)
		require.Equal(t, 0, l.NumRequeues(0))
		require.Equal(t, ms(5), l.When(0))

		other := DefaultControllerRateLimiter[int]()
		require.Equal(t, ms(5), other.When(0), "each call builds its own bucket and counts")
	})

	// Long runs of one key reach the 1000s cap and stay there.
	l := DefaultControllerRateLimiter[string]()
	ds := whenSeq(l, "a", 30)
	require.Equal(t, ms(655360), ds[17])
	require.Equal(t, 1000*time.Second, ds[18])
	require.Equal(t, 1000*time.Second, ds[29])
}

// TestRateLimiterZeroValues checks that every limiter's zero value can be
// used and never delays, as documented.
func TestRateLimiterZeroValues(t *testing.T) {
	t.Parallel()
	for name, l := range map[string]RateLimiter[string]{
		"exponential": &ItemExponentialFailureRateLimiter[string]{},
		"fast-slow":   &ItemFastSlowRateLimiter[string]{},
		"bucket":      &BucketRateLimiter[string]{},
		"max-of":      &MaxOfRateLimiter[string]{},
		"max-wait":    &WithMaxWaitRateLimiter[string]{},
	} {
		require.Equal(t, []time.Duration{0, 0}, whenSeq(l, "a", 2), "%s: the zero value never delays", name)
		l.NumRequeues("a")
		l.Forget("a")
		require.Equal(t, 0, l.NumRequeues("a"), "%s: nothing tracked after Forget", name)
	}
	e := &ItemExponentialFailureRateLimiter[string]{}
	e.When("a")
	require.Equal(t, 1, e.NumRequeues("a"), "the zero value still counts failures")
}

// TestRateLimiterConstructorsRejectNil checks that nil arguments panic at
// construction, with the package prefix.
func TestRateLimiterConstructorsRejectNil(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"bucket":   func() { NewBucketRateLimiter[string](nil) },
		"max-of":   func() { NewMaxOfRateLimiter[string](fixedLimiter(0), nil) },
		"max-wait": func() { NewWithMaxWaitRateLimiter[string](nil, time.Second) },
	} {
		msg := func() (msg any) {
			defer func() { msg = recover() }()
			f()
			return nil
		}()
		require.NotNil(t, msg, "%s: a nil limiter must panic", name)
		require.True(t, strings.HasPrefix(fmt.Sprint(msg), "workqueue: "), "%s: panic %q must start with the package name", name, msg)
	}
}

// TestRateLimiterForgetShrinksMap checks that a limiter's failure map is
// replaced by a small one after a burst of 100k keys is forgotten, so its
// memory follows the live key count, not its peak.
func TestRateLimiterForgetShrinksMap(t *testing.T) {
	t.Parallel()
	const burst = 100_000
	e := NewItemExponentialFailureRateLimiter[int](ms(1), time.Second)
	f := NewItemFastSlowRateLimiter[int](ms(1), time.Second, 1)
	for _, tc := range []struct {
		name string
		l    RateLimiter[int]
		m    *shrinkingMap[int, int]
	}{{"exponential", e, &e.failures.m}, {"fast-slow", f, &f.failures.m}} {
		for k := range burst {
			tc.l.When(k)
		}
		require.Equal(t, burst, len(tc.m.m), "%s: one entry per failing key", tc.name)
		before := reflect.ValueOf(tc.m.m).UnsafePointer()

		// Keep a few keys to check that shrinking preserves them.
		for k := 10; k < burst; k++ {
			tc.l.Forget(k)
		}
		require.Equal(t, 10, len(tc.m.m), "%s: survivors remain", tc.name)
		require.NotEqual(t, before, reflect.ValueOf(tc.m.m).UnsafePointer(), "%s: the map of the burst was replaced", tc.name)
		require.Less(t, tc.m.peak, shrinkMin, "%s: the new map is sized for the survivors", tc.name)
		for k := range 10 {
			require.Equal(t, 1, tc.l.NumRequeues(k), "%s: key %d keeps its count across the shrink", tc.name, k)
			tc.l.Forget(k)
		}
		require.Zero(t, len(tc.m.m), "%s: all forgotten", tc.name)
	}
}

// TestRateLimitersConcurrent hammers every limiter from several goroutines;
// run it with -race. Failures are counted exactly and no delay is negative.
func TestRateLimitersConcurrent(t *testing.T) {
	t.Parallel()
	const (
		workers = 8
		rounds  = 500
		keys    = 4
	)
	for name, mk := range map[string]func() RateLimiter[int]{
		"exponential": func() RateLimiter[int] {
			return NewItemExponentialFailureRateLimiter[int](time.Nanosecond, time.Second)
		},
		"fast-slow": func() RateLimiter[int] { return NewItemFastSlowRateLimiter[int](0, time.Second, 10) },
		"default":   DefaultControllerRateLimiter[int],
		"max-wait": func() RateLimiter[int] {
			return NewWithMaxWaitRateLimiter[int](NewItemExponentialFailureRateLimiter[int](time.Nanosecond, time.Hour), time.Second)
		},
	} {
		l := mk()
		var negative, tooLong atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				// Private keys pile up past shrinkMin in total and are
				// then forgotten, so shrinking runs under contention.
				own := 1000 + w*rounds
				for i := range rounds {
					d := l.When(i % keys)
					if d < 0 {
						negative.Add(1)
					}
					if d > 1000*time.Second {
						tooLong.Add(1)
					}
					l.NumRequeues(i % keys)
					l.When(own + i)
				}
				for i := range rounds {
					l.Forget(own + i)
				}
			})
		}
		wg.Wait()
		require.Zero(t, negative.Load(), "%s: no negative delay", name)
		require.Zero(t, tooLong.Load(), "%s: no delay beyond max", name)
		for k := range keys {
			require.Equal(t, workers*rounds/keys, l.NumRequeues(k), "%s: key %d: every failure counted once", name, k)
		}
	}
}

// FuzzItemExponentialFailureRateLimiter checks the exponential limiter
// against exact big-integer arithmetic for arbitrary arguments.
func FuzzItemExponentialFailureRateLimiter(f *testing.F) {
	f.Add(int64(time.Millisecond), int64(time.Second), uint16(20))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), uint16(3))
	f.Add(int64(math.MaxInt64/2), int64(math.MaxInt64), uint16(3))
	f.Add(int64(1), int64(math.MaxInt64), uint16(70))
	f.Add(int64(0), int64(math.MaxInt64), uint16(1100))
	f.Add(int64(-5), int64(-5), uint16(3))
	f.Fuzz(func(t *testing.T, base, maxDelay int64, n uint16) {
		failures := int(n % 1200)
		l := NewItemExponentialFailureRateLimiter[int](time.Duration(base), time.Duration(maxDelay))
		prev := time.Duration(0)
		for i := range failures {
			d := l.When(0)
			require.GreaterOrEqual(t, d, prev, "failure %d: delays never decrease", i)
			require.Equal(t, exponentialReference(time.Duration(base), time.Duration(maxDelay), i), d, "failure %d", i)
			prev = d
		}
		require.Equal(t, failures, l.NumRequeues(0))
	})
}
