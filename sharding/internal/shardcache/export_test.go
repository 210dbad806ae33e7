package shardcache

// Foreign returns the number of objects handed to inf's stores that they
// did not keep because of their shard: the ListerWatcher filters first, so
// it stays 0.
func Foreign(inf *Informer) int {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.foreign
}
