package prometheus

// LiveQueues returns how many queues p reports gauges for (and keeps
// reachable).
func LiveQueues(p *Provider) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queues)
}
