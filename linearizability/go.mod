module github.com/go-coalesce/workqueue/linearizability

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/go-coalesce/workqueue v0.1.0
	go.uber.org/goleak v1.3.0
)

require golang.org/x/time v0.16.0 // indirect

replace github.com/go-coalesce/workqueue => ../
