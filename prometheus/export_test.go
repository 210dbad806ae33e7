package prometheus

// LiveQueues returns how many queues p reports gauges for (and keeps
// reachable).
func LiveQueues(p *Provider) int {
	return p.book.Len()
}

// AgedQueues returns how many queues p reports ready ages for (and keeps
// reachable).
func AgedQueues(p *Provider) int {
	return p.ages.Len()
}
