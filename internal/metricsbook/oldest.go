package metricsbook

// The ready-age gauge (Ages) as the Prometheus exposition format names it,
// shared by the providers that report it to a Prometheus registry (the
// Prometheus adapter, and interop/hostmetrics into a host's registry), so
// that one dashboard or alert finds it whichever of them a process uses.
// Its labels are the provider's labels of a queue, then PriorityLabel.
const (
	OldestReadyName = "workqueue_oldest_ready_seconds"
	OldestReadyHelp = "How many seconds the oldest ready item at each priority of the " +
		"workqueue has been waiting, also behind a tenant's cap. A value that keeps growing means " +
		"the priority is not being served."
	PriorityLabel = "priority"
)
