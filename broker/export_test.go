package broker

// Tracked is how many deliveries b holds an ordering place for.
func Tracked(b *Broker) int { return b.tracked() }
