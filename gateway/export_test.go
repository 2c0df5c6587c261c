package gateway

// HeldBytes returns the bytes of g's hold budget that answers hold now.
func HeldBytes(g *Gateway) int64 { return g.held.used.Load() }
