// Package linearizability checks that the queue of
// github.com/go-coalesce/workqueue is linearizable: its tests record
// histories of concurrent calls on real queues and check each against the
// sequential specification of docs/protocol.md's state table with
// Porcupine. The module holds tests only and is never published, so that
// Porcupine stays out of the core module's dependencies; see README.md.
package linearizability
