// Package controller is a small client-go controller, written the way many
// are: an informer turns ConfigMap events into keys, workers take keys
// until their context ends, and on the way out the queue is drained so
// that the syncs in flight finish. Its sync stamps each ConfigMap with a
// hash of its data (an annotation), so the controller has converged when
// every ConfigMap carries the hash of its current data.
//
// This copy is ../before, client-go's controller, moved to
// github.com/go-coalesce/workqueue: the import, the queue's type and its
// constructor changed, nothing else (MIGRATING.md shows the diff).
package controller
