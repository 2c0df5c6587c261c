package mockllm

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// socket stands in for the listener: it records whether the schedule has
// it closed for a refuse step.
type socket struct{ closed atomic.Bool }

func (s *socket) refuse(on bool) error {
	s.closed.Store(on)
	return nil
}

// moment is something a test does at a time after the schedule starts.
type moment struct {
	at   time.Duration // since start
	do   string        // "take" as a model request does, "peek" as GET /health does, or "look" at the socket only
	want string        // the step's label ("ok", "503", "refused"); for "look", "refused" or "open"
}

// The window rules, in virtual time: each moment comes at its instant
// exactly, so that a rule is checked at the edge of a window, where a
// wrong one would give the other step.
func TestScheduleWindows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		fromFirst    bool
		moments      []moment
	}{
		// Windows add up to a timeline: the 503s begin when the 502s end,
		// not when a request notices it, so they end at 400ms although
		// the first 503 came at 250ms.
		{
			name: "timeline", script: "502 for 200ms,503 for 200ms,ok",
			moments: []moment{
				{0, "take", "502"}, {199 * time.Millisecond, "take", "502"},
				{250 * time.Millisecond, "take", "503"}, {399 * time.Millisecond, "take", "503"},
				{400 * time.Millisecond, "take", "ok"},
			},
		},
		// A window ends on time with no request at all: a refuse step
		// after it closes the socket, and reopens it, on its own.
		{
			name: "no request", script: "503 for 1s,refuse:1s,ok",
			moments: []moment{
				{0, "look", "open"}, {1 * time.Second, "look", "refused"},
				{2 * time.Second, "look", "open"}, {2 * time.Second, "take", "ok"},
			},
		},
		// A window after counted steps starts when the last counted
		// request came: not at start, and not at the first of the count.
		{
			name: "after a count", script: "502x2,503 for 1s,ok",
			moments: []moment{
				{2 * time.Second, "take", "502"}, {5 * time.Second, "take", "502"},
				{5 * time.Second, "take", "503"}, {5*time.Second + 999*time.Millisecond, "take", "503"},
				{6 * time.Second, "take", "ok"},
			},
		},
		// By default the first window starts at start: a host that comes
		// 3 s late sees 2 s of a 5 s window, and one 5 s late none.
		{
			name: "from start", script: "429 for 5s,ok",
			moments: []moment{
				{3 * time.Second, "take", "429"}, {5 * time.Second, "take", "ok"},
			},
		},
		// With fromFirst, the first window starts at the first request,
		// however late, and the windows after it follow on from there.
		{
			name: "from the first request", script: "429 for 5s,503 for 1s,ok", fromFirst: true,
			moments: []moment{
				{6 * time.Second, "take", "429"}, {10*time.Second + 999*time.Millisecond, "take", "429"},
				{11 * time.Second, "take", "503"}, {12 * time.Second, "take", "ok"},
			},
		},
		// With fromFirst, GET /health sees the first step but does not
		// start its clock: only a model request does.
		{
			name: "health does not start the clock", script: "loading for 1s,ok", fromFirst: true,
			moments: []moment{
				{5 * time.Second, "peek", "loading"}, {10 * time.Second, "take", "loading"},
				{10*time.Second + 500*time.Millisecond, "peek", "loading"}, {11 * time.Second, "peek", "ok"},
			},
		},
		// With fromFirst, a first step that refuses starts at start all
		// the same, since no request could reach the closed socket to
		// start it; the window after it follows on from it.
		{
			name: "refuse first", script: "refuse:1s,503 for 1s,ok", fromFirst: true,
			moments: []moment{
				{0, "look", "refused"}, {1 * time.Second, "look", "open"},
				{1500 * time.Millisecond, "take", "503"}, {2 * time.Second, "take", "ok"},
			},
		},
		// With fromFirst, counted steps go as they always do.
		{
			name: "count first", script: "502,503 for 1s,ok", fromFirst: true,
			moments: []moment{
				{5 * time.Second, "take", "502"}, {5 * time.Second, "take", "503"},
				{6 * time.Second, "take", "ok"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var sock socket
				sc := newSchedule(MustParseScript(tc.script), sock.refuse, t.Logf)
				defer sc.close()
				begin := time.Now()
				sc.start(begin, tc.fromFirst)
				for _, m := range tc.moments {
					time.Sleep(time.Until(begin.Add(m.at)))
					synctest.Wait() // let a timer due at this instant run first
					got := happen(sc, &sock, m.do)
					if got != m.want {
						t.Errorf("%s at %v: got %s, want %s", m.do, m.at, got, m.want)
					}
					if closed := sock.closed.Load(); closed != (got == "refused") {
						t.Errorf("%s at %v: socket closed %v with the step %s", m.do, m.at, closed, got)
					}
				}
			})
		})
	}
}

// happen does what a moment says, and returns what it saw.
func happen(sc *schedule, sock *socket, do string) string {
	switch do {
	case "take":
		st, _ := sc.take(time.Now())
		return st.label()
	case "peek":
		st := sc.peek(time.Now())
		return st.label()
	}
	if sock.closed.Load() {
		return "refused"
	}
	return "open"
}

// Start hands FromFirstRequest to the schedule: with it, the clock waits
// for the first request; without it, it runs from Start.
func TestStartFromFirstRequest(t *testing.T) {
	t.Parallel()
	for _, from := range []bool{false, true} {
		s := &Server{Script: MustParseScript("503 for 1h,ok"), FromFirstRequest: from}
		if err := s.Start(""); err != nil {
			t.Fatal(err)
		}
		s.sched.mu.Lock()
		waiting := s.sched.waiting
		s.sched.mu.Unlock()
		s.Close()
		if waiting != from {
			t.Errorf("FromFirstRequest %v: got waiting %v, want %v", from, waiting, from)
		}
	}
}
