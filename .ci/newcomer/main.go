// Command newcomer is what a new user writes after the `go get` lines of
// README.md's Install section. .ci/release-proof copies this file, plus one
// file per module under test (named after the module's folder, workqueue.go
// for the root module), into a fresh module outside the repository that
// fetches our modules from a local module proxy, then builds and runs it.
//
// Each module's file registers one check in an init function; the program
// runs them in order and exits 1 at the first that fails. Nothing here is
// compiled inside the repository (the folder starts with a dot), only in
// that fresh module.
package main

import (
	"fmt"
	"os"
	"sort"
)

// checks maps a module's folder ("." for the root) to what a user would
// first do with it; it returns a line to print, or what went wrong.
var checks = map[string]func() (string, error){}

// register adds the check of the module in folder dir.
func register(dir string, check func() (string, error)) {
	if _, dup := checks[dir]; dup {
		panic("newcomer: two checks for " + dir)
	}
	checks[dir] = check
}

func main() {
	dirs := make([]string, 0, len(checks))
	for d := range checks {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		msg, err := checks[d]()
		if err != nil {
			fmt.Fprintf(os.Stderr, "newcomer: %s: %v\n", d, err)
			os.Exit(1)
		}
		fmt.Printf("newcomer: %s: ok: %s\n", d, msg)
	}
}
