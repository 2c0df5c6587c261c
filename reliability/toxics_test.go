package reliability_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// A toxic is a Toxiproxy toxic on the upstream's answers: its type and
// attributes, as Toxiproxy's API takes them. It is on the downstream
// (upstream to caller) side, so that every request reaches the mock,
// which counts it, and only what comes back is harmed.
type toxic struct {
	kind  string
	attrs map[string]int
}

// newProxy starts a Toxiproxy proxy on listen (a loopback address) in
// front of the server at upstream (a base URL), with tx on it if tx is
// not nil. The toxic is added before the proxy accepts a connection, so
// every connection has it from its first byte: toxics changed on live
// links race with the data already in flight.
func newProxy(t *testing.T, listen, upstream string, tx *toxic) *toxiproxy.Proxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "upstream", listen, u.Host)
	if tx != nil {
		b, err := json.Marshal(map[string]any{"type": tx.kind, "stream": "downstream", "attributes": tx.attrs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
			t.Fatalf("toxic %s: %v", b, err)
		}
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// proxyURL is the base URL of a started proxy. Its port stays the same
// across Stop and Start: Toxiproxy listens again on the address it got.
func proxyURL(p *toxiproxy.Proxy) string {
	p.Lock()
	defer p.Unlock()
	return "http://" + p.Listen
}

// quietPorts are the ports quietAddr has handed out, never handed out
// again in this process.
var quietPorts = struct {
	sync.Mutex // guards used
	used       map[int]bool
}{used: map[int]bool{}}

// quietAddr returns a free loopback address for a proxy that will be
// stopped, with a port below the kernel's range of ephemeral ports. A
// socket that asks for any free port gets one from that range, so while
// the proxy is down no other server of the test (or of a test run beside
// it) takes the port and answers in its place, as one did with a port
// the kernel had chosen.
func quietAddr(t *testing.T) string {
	t.Helper()
	const from = 10000
	below := 32768 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &below)
	}
	if below <= from+1000 {
		return "127.0.0.1:0" // no room below the range: take the kernel's choice
	}
	quietPorts.Lock()
	defer quietPorts.Unlock()
	for range 100 {
		port := from + rand.IntN(below-from)
		if quietPorts.used[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // in use
		}
		l.Close()
		quietPorts.used[port] = true
		return l.Addr().String()
	}
	t.Fatalf("no free port in [%d, %d) after 100 tries", from, below)
	return ""
}
