//go:build race

package linearizability

// raceEnabled reports whether the tests run under the race detector, so
// that TestMutantsCaught builds its mutated tests the same way and reuses
// the packages already compiled for this build.
const raceEnabled = true
