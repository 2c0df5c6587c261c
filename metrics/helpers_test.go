package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape GETs h and returns each sample's value by its series, written as
// name{label="value",…} with the labels in name order (the name alone
// when there are none). A histogram gives its _count and _sum.
func scrape(t testing.TB, h http.Handler) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/outlast/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: got status %d, want 200; body:\n%s", rec.Code, rec.Body)
	}
	return parse(t, rec.Body.String())
}

// parse reads Prometheus's text exposition format, as scrape returns it.
func parse(t testing.TB, text string) map[string]float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing the exposition: %v\n%s", err, text)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := seriesLabels(m)
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+labels] = m.GetHistogram().GetSampleSum()
			case dto.MetricType_COUNTER:
				out[name+labels] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name+labels] = m.GetGauge().GetValue()
			default:
				t.Fatalf("series %s%s: got type %v, want a counter, gauge or histogram", name, labels, f.GetType())
			}
		}
	}
	return out
}

func seriesLabels(m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return ""
	}
	var pairs []string
	for _, l := range m.GetLabel() {
		pairs = append(pairs, l.GetName()+"="+`"`+l.GetValue()+`"`)
	}
	sort.Strings(pairs)
	return "{" + strings.Join(pairs, ",") + "}"
}

// checkFallbacks checks want's series in got, as checkSeries does, and that
// got counts no move that want does not name.
func checkFallbacks(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, v := range got {
		if strings.HasPrefix(k, "outlast_fallbacks_total{") && v != 0 && want[k] == 0 {
			t.Errorf("%s: got %v, want none", k, v)
		}
	}
	checkSeries(t, got, want)
}

// checkSeries reports every series in want whose value in got differs,
// absent ones included.
func checkSeries(t *testing.T, got, want map[string]float64) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: got no series, want %v", k, want[k])
		case v != want[k]:
			t.Errorf("%s: got %v, want %v", k, v, want[k])
		}
	}
}
