package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testRedis returns the Redis of the tests that need one, skipping the
// test when OUTLAST_TEST_REDIS is unset (outside CI).
func testRedis(t *testing.T) string {
	t.Helper()
	url := os.Getenv("OUTLAST_TEST_REDIS")
	if url == "" {
		t.Skip("OUTLAST_TEST_REDIS is unset")
	}
	return url
}

// slotUpstream is an upstream with one slot: it counts the requests it
// sees in flight at once, and records the X-Seq of each in order. While
// hold is set, requests wait for it to be cleared.
type slotUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	inFlight int
	overlaps int
	seen     []string
	held     chan struct{} // closed to let held requests go
	arrived  chan struct{} // told of each arrival
}

func newSlotUpstream(t *testing.T, service time.Duration) *slotUpstream {
	u := &slotUpstream{held: make(chan struct{}), arrived: make(chan struct{}, 1024)}
	close(u.held)
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.inFlight++
		if u.inFlight > 1 {
			u.overlaps++
		}
		u.seen = append(u.seen, r.Header.Get("X-Seq"))
		held := u.held
		u.mu.Unlock()
		u.arrived <- struct{}{}
		<-held
		time.Sleep(service)
		u.mu.Lock()
		u.inFlight--
		u.mu.Unlock()
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(u.Close)
	return u
}

// hold makes the requests that arrive from now on wait for release.
func (u *slotUpstream) hold() {
	u.mu.Lock()
	u.held = make(chan struct{})
	u.mu.Unlock()
}

func (u *slotUpstream) release() {
	u.mu.Lock()
	close(u.held)
	u.mu.Unlock()
}

// health reads p's /outlast/health.
func health(t *testing.T, client *http.Client, p *process) map[string]any {
	t.Helper()
	resp, err := client.Get(p.addr + "/outlast/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// queued returns the requests waiting for the first upstream's bound, as
// p's health reports them: across the replicas, with a shared gate.
func queued(t *testing.T, client *http.Client, p *process) int {
	h := health(t, client, p)
	ups := h["upstreams"].([]any)
	return int(ups[0].(map[string]any)["queued"].(float64))
}

// waitUntil polls cond until it holds, failing the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// post sends one completion through p, with seq as its X-Seq, and returns
// the status, the error type of a refusal, and the request ID.
func post(client *http.Client, p *process, seq int) (status int, kind, id string, err error) {
	req, _ := http.NewRequest(http.MethodPost, p.addr+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Seq", strconv.Itoa(seq))
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		var e struct {
			Error struct {
				Type string `json:"type"`
			} `json:"error"`
		}
		json.Unmarshal(b, &e)
		kind = e.Error.Type
	}
	return resp.StatusCode, kind, resp.Header.Get("Outlast-Request-Id"), nil
}

// replicas starts n outlast serve processes in front of url, sharing the
// gates and admission state through redis.
func replicas(t *testing.T, n int, redis string, args ...string) []*process {
	ps := make([]*process, n)
	for i := range ps {
		ps[i] = startProcess(t, append([]string{"--redis", redis, "--journal", "off"}, args...)...)
	}
	return ps
}

// Three replicas in front of one upstream with one slot keep one bound
// and one queue: the upstream never has two requests at once, the queue's
// bound holds across them (every request past it is refused busy, no
// more, no fewer), and requests are served in the order they joined the
// queue, whichever replica they came through.
func TestReplicasShareOneSlot(t *testing.T) {
	t.Parallel()
	redis := testRedis(t)
	up := newSlotUpstream(t, 5*time.Millisecond)
	const queue = 20
	ps := replicas(t, 3, redis, "--upstream", up.URL, "--slots", "1", "--queue", strconv.Itoa(queue))
	client := newClient(t)
	for _, p := range ps {
		if g := health(t, client, p)["gate"].(map[string]any); g["backend"] != "redis" || g["state"] != "ok" || g["replica"] == "" {
			t.Fatalf("health's gate %v, want the redis backend, ok, and a replica name", g)
		}
	}

	type result struct {
		seq         int
		status      int
		kind, id    string
		err         error
		replica     int
		respondedAt time.Time
	}
	results := make(chan result, 200)
	send := func(seq int) {
		r := seq % 3
		status, kind, id, err := post(client, ps[r], seq)
		results <- result{seq, status, kind, id, err, r, time.Now()}
	}
	// Request 0 holds the slot; 1 to 20 join the queue one at a time,
	// across the replicas, so that their order is known.
	up.hold()
	go send(0)
	<-up.arrived
	for seq := 1; seq <= queue; seq++ {
		go send(seq)
		waitUntil(t, 5*time.Second, fmt.Sprintf("request %d to join the shared queue", seq), func() bool { return queued(t, client, ps[0]) == seq })
	}
	// The queue is full for the fleet: every one of 179 more is refused.
	// They go nine at a time, three per replica: 179 at once, under the
	// race detector on two cores, starve the replicas' Redis calls past
	// their 500 ms bound, and a replica that cannot reach Redis rightly
	// stands in with its own gate, whose queue is empty.
	var wg sync.WaitGroup
	senders := make(chan struct{}, 9)
	for seq := queue + 1; seq < 200; seq++ {
		senders <- struct{}{}
		wg.Go(func() {
			defer func() { <-senders }()
			send(seq)
		})
	}
	wg.Wait()
	busy := 0
	for range 200 - queue - 1 {
		r := <-results
		if r.err != nil || r.status != 503 || r.kind != "outlast_busy" {
			t.Errorf("request %d, past the queue's bound: %d %q %v, want 503 outlast_busy", r.seq, r.status, r.kind, r.err)
			continue
		}
		busy++
	}
	if busy != 200-queue-1 {
		t.Errorf("%d refused busy, want %d: 200 less the one in flight and the %d the queue holds", busy, 200-queue-1, queue)
	}
	up.release()
	ids := map[string]bool{}
	for range queue + 1 {
		r := <-results
		if r.err != nil || r.status != 200 {
			t.Errorf("request %d: %d %q %v, want 200", r.seq, r.status, r.kind, r.err)
		}
		if ids[r.id] || r.id == "" {
			t.Errorf("request %d: Outlast-Request-Id %q, want one unique across the replicas", r.seq, r.id)
		}
		ids[r.id] = true
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.overlaps > 0 {
		t.Errorf("the upstream saw two requests at once %d times, want never", up.overlaps)
	}
	want := make([]string, queue+1)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	if !slices.Equal(up.seen, want) {
		t.Errorf("the upstream served %v, want the order of the queue %v", up.seen, want)
	}
}

// 200 concurrent requests spread over three replicas, with room for all
// in the queue: each gets exactly one answer, a 200, and the upstream's
// one slot never holds two.
func TestReplicas200Concurrent(t *testing.T) {
	t.Parallel()
	redis := testRedis(t)
	up := newSlotUpstream(t, 2*time.Millisecond)
	ps := replicas(t, 3, redis, "--upstream", up.URL, "--slots", "1", "--queue", "256")
	client := newClient(t)
	client.Timeout = 60 * time.Second
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for seq := range 200 {
		wg.Go(func() {
			status, kind, _, err := post(client, ps[seq%3], seq)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("request %d: %v", seq, err)
				return
			}
			statuses[status]++
			if status != 200 {
				t.Errorf("request %d: %d %s, want 200", seq, status, kind)
			}
		})
	}
	wg.Wait()
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.overlaps > 0 {
		t.Errorf("the upstream saw two requests at once %d times, want never", up.overlaps)
	}
	if len(up.seen) != 200 {
		t.Errorf("the upstream saw %d requests, want 200: one each (statuses %v)", len(up.seen), statuses)
	}
}

// A replica killed while it holds the slot loses it when its lease runs
// out: another replica's queued request starts within the lease (15 s)
// and a second, and the surviving replicas lose nothing.
func TestReplicaKilledHoldingTheSlot(t *testing.T) {
	t.Parallel()
	redis := testRedis(t)
	up := newSlotUpstream(t, 0)
	ps := replicas(t, 3, redis, "--upstream", up.URL, "--slots", "1", "--queue", "8")
	client := newClient(t)
	client.Timeout = 60 * time.Second
	up.hold()
	go post(client, ps[0], 0) // its replica dies holding the slot
	<-up.arrived
	done := make(chan error, 2)
	for seq, r := range []int{1, 2} {
		go func() {
			status, kind, _, err := post(client, ps[r], seq+1)
			if err == nil && status != 200 {
				err = fmt.Errorf("request %d: %d %s, want 200", seq+1, status, kind)
			}
			done <- err
		}()
		waitUntil(t, 5*time.Second, "the request to queue", func() bool { return queued(t, client, ps[1]) == seq+1 })
	}
	killed := time.Now()
	ps[0].cmd.Process.Signal(syscall.SIGKILL)
	up.release() // the dead replica's request is answered to nobody
	<-up.arrived // ... and the next holder's arrives
	if d := time.Since(killed); d > 16*time.Second {
		t.Errorf("the queued request started %v after its holder was killed, want within the 15 s lease and a second", d)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// When Redis stops, the replicas fall back to their own gates and say so
// (health, outlast_gate_degraded) and no request hangs; when it is back,
// they share again.
func TestReplicasRedisRestart(t *testing.T) {
	t.Parallel()
	testRedis(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: the restart test needs one of its own")
	}
	port := freePort(t)
	startRedis := func() *exec.Cmd {
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		waitUntil(t, 10*time.Second, "redis-server to listen", func() bool {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err == nil {
				c.Close()
			}
			return err == nil
		})
		return cmd
	}
	rs := startRedis()
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	up := newSlotUpstream(t, time.Millisecond)
	ps := replicas(t, 2, url, "--upstream", up.URL, "--slots", "1", "--queue", "64")
	client := newClient(t)
	sendAll := func(phase string) {
		t.Helper()
		var wg sync.WaitGroup
		for seq := range 20 {
			wg.Go(func() {
				start := time.Now()
				status, kind, _, err := post(client, ps[seq%2], seq)
				if err != nil || status != 200 {
					t.Errorf("%s: request %d: %d %s %v, want 200", phase, seq, status, kind, err)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("%s: request %d took %v, want no hang", phase, seq, d)
				}
			})
		}
		wg.Wait()
	}
	gateState := func(p *process) string {
		return health(t, client, p)["gate"].(map[string]any)["state"].(string)
	}
	sendAll("with redis")
	rs.Process.Kill()
	rs.Wait()
	sendAll("redis stopped")
	for i, p := range ps {
		if s := gateState(p); s != "degraded" {
			t.Errorf("replica %d with redis stopped: gate state %q, want degraded", i, s)
		}
		if m := scrapeMetric(t, client, p, "outlast_gate_degraded"); m != "1" {
			t.Errorf("replica %d with redis stopped: outlast_gate_degraded %q, want 1", i, m)
		}
	}
	startRedis()
	for i, p := range ps {
		waitUntil(t, 10*time.Second, fmt.Sprintf("replica %d to share again", i), func() bool { return gateState(p) == "ok" })
	}
	sendAll("redis back")
	for i, p := range ps {
		// An info line waits up to logFlushAfter in serve's log buffer.
		said := func() bool {
			return strings.Contains(p.log.String(), "redis is unreachable") && strings.Contains(p.log.String(), "redis is back")
		}
		waitUntil(t, 10*time.Second, fmt.Sprintf("replica %d's log to say that redis went and came back", i), said)
		// Its log is JSON lines throughout, the Redis client's included,
		// which it writes while Redis is down.
		for line := range strings.Lines(p.log.String()) {
			if !json.Valid([]byte(line)) {
				t.Errorf("replica %d's log has a line that is not JSON: %q", i, line)
			}
		}
	}
}

// freePort returns a TCP port on loopback that nothing listens on now.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// scrapeMetric returns the value of a metric without labels from p's
// /outlast/metrics, or "".
func scrapeMetric(t *testing.T, client *http.Client, p *process, name string) string {
	resp, err := client.Get(p.addr + "/outlast/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// outageUpstream answers 503 for outage from its first request, then 200
// after service. It counts attempts, and the most in flight at once
// while down after from (by then every replica knows it is down).
type outageUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	start    time.Time
	outage   time.Duration
	inFlight int
	attempts int
	downPeak int
	probes   int       // attempts while down, from quiet on
	quiet    time.Time // from when the down peak and probes count
}

func newOutageUpstream(t *testing.T, outage, service time.Duration) *outageUpstream {
	u := &outageUpstream{outage: outage}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		now := time.Now()
		if u.start.IsZero() {
			u.start = now
		}
		u.attempts++
		u.inFlight++
		down := now.Before(u.start.Add(u.outage))
		if down && !u.quiet.IsZero() && now.After(u.quiet) {
			u.downPeak = max(u.downPeak, u.inFlight)
			u.probes++
		}
		u.mu.Unlock()
		defer func() {
			u.mu.Lock()
			u.inFlight--
			u.mu.Unlock()
		}()
		if down {
			time.Sleep(20 * time.Millisecond) // long enough for probes to overlap, were there two
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"message":"down","type":"server_error"}}`)
			return
		}
		time.Sleep(service)
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(u.Close)
	return u
}

// An outage of 20 s across three replicas that share Redis: once the
// fleet knows the upstream is down, the upstream sees one probe at a
// time, and the attempts per request stay near one replica's alone, not
// three times its probes.
func TestReplicasOutage(t *testing.T) {
	t.Parallel()
	redis := testRedis(t)
	run := func(t *testing.T, n int) (perRequest float64, downPeak int, probes float64) {
		up := newOutageUpstream(t, 20*time.Second, 50*time.Millisecond)
		args := []string{"--upstream", up.URL, "--waits", "1s,2s,4s", "--reserve", "5s", "--max-conns", "256"}
		var ps []*process
		if n > 1 {
			ps = replicas(t, n, redis, args...)
		} else {
			ps = []*process{startProcess(t, append([]string{"--journal", "off"}, args...)...)}
		}
		client := newClient(t)
		client.Timeout = 90 * time.Second
		// 30 callers, each sending a request every 500 ms, or when its
		// last ends if later, for 30 s: through the outage and after.
		const callers = 30
		end := time.Now().Add(30 * time.Second)
		var mu sync.Mutex
		requests, failed := 0, 0
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for time.Now().Before(end) {
					next := time.Now().Add(500 * time.Millisecond)
					req, _ := http.NewRequest(http.MethodPost, ps[c%len(ps)].addr+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
					req.Header.Set("Outlast-Timeout", "60s")
					resp, err := client.Do(req)
					mu.Lock()
					requests++
					if err != nil || resp.StatusCode != 200 {
						failed++
					}
					mu.Unlock()
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					time.Sleep(time.Until(next))
				}
			})
		}
		// Once every replica says the upstream is down, count overlaps.
		waitUntil(t, 10*time.Second, "every replica to see the upstream down", func() bool {
			for _, p := range ps {
				ups := health(t, client, p)["upstreams"].([]any)
				adm, _ := ups[0].(map[string]any)["admission"].(map[string]any)
				if adm == nil || adm["state"] == "healthy" {
					return false
				}
			}
			return true
		})
		up.mu.Lock()
		up.quiet = time.Now()
		up.mu.Unlock()
		wg.Wait()
		up.mu.Lock()
		defer up.mu.Unlock()
		left := up.start.Add(up.outage).Sub(up.quiet)
		t.Logf("%d replicas: %d requests, %d failed, %d attempts (%.2f per request); once all knew: %d probes in %v, down peak %d", n, requests, failed, up.attempts, float64(up.attempts)/float64(requests), up.probes, left.Round(time.Millisecond), up.downPeak)
		if failed > 0 {
			t.Errorf("%d of %d requests failed, want none: a 60 s deadline outlasts a 20 s outage", failed, requests)
		}
		return float64(up.attempts) / float64(requests), up.downPeak, float64(up.probes) / left.Seconds()
	}
	var one, three, oneRate, threeRate float64
	var peak int
	var wg sync.WaitGroup
	wg.Go(func() { one, _, oneRate = run(t, 1) })
	wg.Go(func() { three, peak, threeRate = run(t, 3) })
	wg.Wait()
	// Probes 1 s, 2 s, then every 4 s, jittered up by half: about one
	// every 5 s for the fleet, as for one replica; three replicas alone
	// would probe three times as often.
	if threeRate > oneRate*1.5+0.1 {
		t.Errorf("three replicas probed %.2f times a second while down, one alone %.2f: want the fleet's one probe, not one each", threeRate, oneRate)
	}
	if peak > 1 {
		t.Errorf("the upstream saw %d attempts at once while the fleet knew it was down, want 1: the fleet's one probe", peak)
	}
	if three > one*1.25+0.05 {
		t.Errorf("three replicas made %.2f attempts per request, one alone %.2f: want the fleet near one replica, not one probe each", three, one)
	}
}

// Replicas that share a PostgreSQL journal keep one record: each one's
// requests are in it, under IDs unique across them, and any replica's
// API reads them all.
func TestReplicasShareTheRecord(t *testing.T) {
	t.Parallel()
	redis := testRedis(t)
	pg := os.Getenv("OUTLAST_TEST_POSTGRES")
	if pg == "" {
		t.Skip("OUTLAST_TEST_POSTGRES is unset")
	}
	up := newSlotUpstream(t, 0)
	run := "replicas-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var ps []*process
	for range 2 {
		ps = append(ps, startProcess(t, "--redis", redis, "--journal", pg, "--upstream", up.URL))
	}
	client := newClient(t)
	ids := map[string]bool{}
	for i, p := range ps {
		req, _ := http.NewRequest(http.MethodPost, p.addr+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Outlast-Run", run)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		id := resp.Header.Get("Outlast-Request-Id")
		if resp.StatusCode != 200 || id == "" || ids[id] {
			t.Fatalf("replica %d: %d, id %q, want 200 and an ID of its own", i, resp.StatusCode, id)
		}
		ids[id] = true
	}
	for i, p := range ps {
		waitUntil(t, 20*time.Second, fmt.Sprintf("replica %d's API to list both replicas' requests", i), func() bool {
			resp, err := client.Get(p.addr + "/outlast/requests?run=" + run)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var page struct {
				Requests []struct {
					ID string `json:"id"`
				} `json:"requests"`
			}
			json.NewDecoder(resp.Body).Decode(&page)
			found := 0
			for _, r := range page.Requests {
				if ids[r.ID] {
					found++
				}
			}
			return found == len(ids)
		})
	}
}
