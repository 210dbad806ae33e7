//go:build !race

package linearizability

const raceEnabled = false
