package metrics_test

import (
	"strings"
	"testing"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/metrics"
	"github.com/outlast-llm/outlast/record"
)

// A pool member exports the limits its answers stated, as its pool
// counts them now; a limit not stated, and an upstream that is no
// member, export none.
func TestPoolMemberHeadroom(t *testing.T) {
	t.Parallel()
	m := metrics.New([]string{"pool", "a", "b"})
	unknown := outlast.Quota{Limit: -1, Remaining: -1}
	m.SetLoads(func() []record.Load {
		return []record.Load{
			{Upstream: "pool", Requests: unknown, Tokens: unknown},
			{Upstream: "a", Pool: "pool", Requests: outlast.Quota{Limit: 60, Remaining: 12}, Tokens: outlast.Quota{Limit: 40000, Remaining: 3100}},
			{Upstream: "b", Pool: "pool", Requests: unknown, Tokens: outlast.Quota{Limit: -1, Remaining: 900}},
		}
	})
	got := scrape(t, m.Handler())
	checkSeries(t, got, map[string]float64{
		`outlast_pool_member_remaining{limit="requests",upstream="a"}`: 12,
		`outlast_pool_member_remaining{limit="tokens",upstream="a"}`:   3100,
		`outlast_pool_member_limit{limit="requests",upstream="a"}`:     60,
		`outlast_pool_member_limit{limit="tokens",upstream="a"}`:       40000,
		`outlast_pool_member_remaining{limit="tokens",upstream="b"}`:   900,
	})
	for k := range got {
		switch {
		case strings.Contains(k, `upstream="pool"`) && strings.HasPrefix(k, "outlast_pool_member"):
			t.Errorf("%s: want no member series for the pool itself", k)
		case strings.Contains(k, `upstream="b"`) && (strings.Contains(k, `limit="requests"`) || strings.HasPrefix(k, "outlast_pool_member_limit")):
			t.Errorf("%s: want no series for a limit b's answers did not state", k)
		}
	}
}
