package otel

// LiveQueues returns how many queues p observes gauges for (and keeps
// reachable).
func LiveQueues(p *Provider) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queues)
}
