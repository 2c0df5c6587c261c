package gate

// MaxFree is maxFree, the bound on each free list.
const MaxFree = maxFree

// Sizes returns the lengths of g's key map and free lists, so that black-box
// tests can check that idle keys are forgotten and that reuse is bounded.
func Sizes(g *Gate) (keys, freeKeys, freeTickets int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.keys), len(g.freeKeys), len(g.freeTickets)
}
