package timeline

import (
	"fmt"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/record"
)

// The feed looks up only the requests in progress: a done request leaves
// the map at once, so that the map's size follows the requests in flight,
// not the thousand kept. A request in progress that was dropped comes
// back as the newest at its next change, once.
func TestFeedLooksUpOnlyLiveRequests(t *testing.T) {
	f := New(3, 0)
	o := f.Observer()
	start := time.Now()
	slow := &record.Request{ID: "slow", Start: start}
	o.AttemptStart(slow, record.Attempt{N: 1, Start: start})
	for i := range 5 {
		succeed(o, &record.Request{ID: fmt.Sprintf("r%d", i), Start: start})
	}
	if len(f.live) != 0 {
		t.Errorf("%d requests in the map after the one in progress was dropped and the rest were done, want 0", len(f.live))
	}
	slow.Attempts = append(slow.Attempts, record.Attempt{N: 1, Start: start, End: start, Status: 200})
	o.AttemptEnd(slow, slow.Attempts[0])
	if len(f.live) != 1 {
		t.Errorf("%d requests in the map with one in progress, want 1", len(f.live))
	}
	o.Done(slow)
	if len(f.live) != 0 {
		t.Errorf("%d requests in the map once all are done, want 0", len(f.live))
	}
	var ids []string
	for _, r := range f.Snapshot().Requests {
		ids = append(ids, r.ID)
	}
	if got, want := fmt.Sprint(ids), "[r3 r4 slow]"; got != want {
		t.Errorf("kept %s, want %s", got, want)
	}
}
