package prometheus

// LiveQueues returns how many queues p reports gauges for (and keeps
// reachable).
func LiveQueues(p *Provider) int {
	return p.book.Len()
}
