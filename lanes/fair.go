package lanes

// Fair is a queue that is FIFO within each fairness key (a tenant) and
// weighted round-robin across keys: it serves the keys that have items in
// turn, taking up to a key's weight of items before moving on; a key that
// drains leaves the round and rejoins at its end. A flood from one key therefore delays
// an item of another key by at most the sum of the other keys' weights per
// item ahead of it in its own key, however long the flood is.
//
// The zero value is an empty queue where every key has weight 1. Fair is
// deterministic and not safe for concurrent use.
type Fair[T any] struct {
	queues  map[string]*fifo[T]
	weights map[string]int
	ring    []string // keys with items, in service order; ring[cur] is served next
	cur     int
	credit  int // items the current key may still take this turn
	n       int
}

type fifo[T any] struct {
	items []T
	head  int
}

// SetWeight sets how many items key may take per turn (default 1; values
// below 1 mean 1). It takes effect from the key's next turn.
func (f *Fair[T]) SetWeight(key string, weight int) {
	if f.weights == nil {
		f.weights = make(map[string]int)
	}
	if weight <= 1 {
		delete(f.weights, key)
		return
	}
	f.weights[key] = weight
}

func (f *Fair[T]) weight(key string) int {
	if w, ok := f.weights[key]; ok {
		return w
	}
	return 1
}

// Push appends item to key's queue. A key that had no items joins the
// round after every key already waiting (it is served last in the cycle
// that starts with the key served next).
func (f *Fair[T]) Push(key string, item T) {
	if f.queues == nil {
		f.queues = make(map[string]*fifo[T])
	}
	q := f.queues[key]
	if q == nil {
		q = &fifo[T]{}
		f.queues[key] = q
		// Join just before the key served next, that is at the end of
		// the current round.
		if len(f.ring) == 0 {
			f.ring = append(f.ring, key)
			f.cur = 0
			f.credit = f.weight(key)
		} else {
			f.ring = append(f.ring, "")
			copy(f.ring[f.cur+1:], f.ring[f.cur:])
			f.ring[f.cur] = key
			f.cur++
		}
	}
	q.items = append(q.items, item)
	f.n++
}

// Pop removes and returns the next item and its key; ok is false when the
// queue is empty.
func (f *Fair[T]) Pop() (item T, key string, ok bool) {
	if f.n == 0 {
		return item, "", false
	}
	key = f.ring[f.cur]
	q := f.queues[key]
	item = q.items[q.head]
	var zero T
	q.items[q.head] = zero
	q.head++
	f.n--
	f.credit--
	if q.head == len(q.items) {
		// The key is drained: it leaves the round.
		delete(f.queues, key)
		f.ring = append(f.ring[:f.cur], f.ring[f.cur+1:]...)
		if f.cur >= len(f.ring) {
			f.cur = 0
		}
		f.credit = 0
	} else {
		if q.head > 64 && q.head*2 > len(q.items) {
			q.items = append(q.items[:0], q.items[q.head:]...)
			q.head = 0
		}
		if f.credit <= 0 {
			f.cur = (f.cur + 1) % len(f.ring)
		}
	}
	if f.credit <= 0 && len(f.ring) > 0 {
		f.credit = f.weight(f.ring[f.cur])
	}
	return item, key, true
}

// Len returns the number of items queued.
func (f *Fair[T]) Len() int { return f.n }

// Keys returns the number of keys with items queued.
func (f *Fair[T]) Keys() int { return len(f.ring) }

// Queued returns the number of items queued for key.
func (f *Fair[T]) Queued(key string) int {
	q := f.queues[key]
	if q == nil {
		return 0
	}
	return len(q.items) - q.head
}
