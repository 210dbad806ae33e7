// Command modes shows which mode each queue's contended rounds fall into:
// it runs distinct-x8-int and the 2x32 worker pool on our queue,
// client-go's and the plain floor, interleaved, and prints each round's
// ns/op beside the share of time the queue's mutex spent in starvation
// mode (sampled every -every). See bench/modes.go.
//
//	go run ./cmd/modes -rounds 9
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue/interop/bench"
)

func main() {
	testing.Init()
	fs := flag.NewFlagSet("modes", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/modes [flags]\n\n"+
			"Prints, per round and queue, the ns/op of the contended rows and the share of time\n"+
			"the queue's mutex was in starvation mode.\n\nflags:\n")
		fs.PrintDefaults()
	}
	rounds := fs.Int("rounds", 7, "interleaved rounds")
	benchtime := fs.Duration("benchtime", 300*time.Millisecond, "time per run")
	every := fs.Duration("every", time.Millisecond, "how often the sampler reads the mutex (0: never, for ns/op without the probe)")
	_ = fs.Parse(os.Args[1:])
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		fmt.Fprintln(os.Stderr, "modes:", err)
		os.Exit(1)
	}
	for _, w := range []struct {
		name string
		mult int
	}{{"distinct-x8-int", 8}, {"pool-2x32-int", 0}} {
		fmt.Printf("%s\n%-6s %-14s %10s %10s\n", w.name, "round", "queue", "ns/op", "starving")
		byQueue := map[string][]bench.ModeResult{}
		for r := range *rounds {
			order := slices.Clone(bench.ModeQueues)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, q := range order {
				res := bench.ModeRound(q, w.mult, *every)
				byQueue[q] = append(byQueue[q], res)
				fmt.Printf("%-6d %-14s %10.1f %9.1f%%\n", r+1, q, res.NsPerOp, 100*res.Starving)
			}
		}
		fmt.Println()
	}
}
