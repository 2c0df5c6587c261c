// Package bufpool is the buffer pool the benchmarks give a bare
// httputil.ReverseProxy, so that it pools its copy buffers as the gateway
// does and the gateway is not credited for avoiding the proxy's garbage.
package bufpool

import "sync"

// Size is the buffers' size: the gateway copies through 32 KiB.
const Size = 32 << 10

// Pool is an httputil.BufferPool of Size-byte buffers. It pools array
// pointers, so that Put does not allocate a slice header. The zero Pool
// is ready to use.
type Pool struct{ p sync.Pool }

func (b *Pool) Get() []byte {
	if a, ok := b.p.Get().(*[Size]byte); ok {
		return a[:]
	}
	return new([Size]byte)[:]
}

func (b *Pool) Put(buf []byte) {
	if len(buf) == Size {
		b.p.Put((*[Size]byte)(buf))
	}
}
