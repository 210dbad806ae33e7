package workqueue

// reuse takes the last element off a free list of released elements (the
// stores keep a few to avoid allocating when a level or tenant comes and
// goes), or allocates a new zero one when the list is empty.
func reuse[E any](free *[]*E) *E {
	if n := len(*free); n > 0 {
		e := (*free)[n-1]
		(*free)[n-1] = nil
		*free = (*free)[:n-1]
		return e
	}
	return new(E)
}
