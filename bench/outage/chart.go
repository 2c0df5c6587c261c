package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	panelW, panelH = 300, 150 // plot area of one policy
	padL, padR     = 44, 14   // around a plot area, for axis labels
	padT, padB     = 22, 22
	chartCols      = 3
	headerH        = 58
)

// chart writes the attempts/s small multiples: one panel per policy on
// shared axes, the outage shaded and the capacity C drawn, so that a herd at
// the recovery stands out against the line.
func (r *report) chart(w io.Writer) error {
	n := len(r.Policies)
	rows := (n + chartCols - 1) / chartCols
	cellW, cellH := panelW+padL+padR, panelH+padT+padB
	width, height := chartCols*cellW, headerH+rows*cellH+8
	top := niceCeil(max(r.maxSeries(), r.Capacity) * 1.05)

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", width, height)
	sc := r.Scenario
	who := "the provider"
	if r.Scenario.Fallback > 0 {
		who = "the primary provider" // series counts the primary's attempts only
	}
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">Attempts per second reaching %s, mean of %d seeds</text>`+"\n", padL, who, len(r.Seeds))
	fmt.Fprintf(&b, `<text x="%d" y="38" fill="#444">Outage %gs–%gs (shaded, Retry-After %s, shape %s); dashed line: capacity C ≈ %.0f/s; light: all attempts; dark: admitted.</text>`+"\n",
		padL, sc.OutageStart, sc.OutageStart+sc.Outage, sc.RetryAfter, sc.Shape, r.Capacity)
	for i, s := range r.Policies {
		x0 := (i%chartCols)*cellW + padL
		y0 := headerH + (i/chartCols)*cellH + padT
		r.panel(&b, s, float64(x0), float64(y0), top)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *report) maxSeries() float64 {
	m := 0.0
	for _, s := range r.Policies {
		for _, v := range s.Series {
			m = max(m, v)
		}
	}
	return m
}

// panel draws one policy's plot with its top-left corner at (x0, y0).
func (r *report) panel(b *strings.Builder, s summary, x0, y0, top float64) {
	end := r.SeriesEnd.Seconds()
	sx := func(t float64) float64 { return x0 + t/end*panelW }
	sy := func(v float64) float64 { return y0 + panelH - math.Min(v, top)/top*panelH }
	sc := r.Scenario

	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-weight="bold">%s</text>`+"\n", x0, y0-7, escape(s.Policy))
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#fbe3e3"/>`+"\n",
		sx(sc.OutageStart), y0, sx(sc.OutageStart+sc.Outage)-sx(sc.OutageStart), panelH)
	// Axes and ticks.
	fmt.Fprintf(b, `<path d="M%.1f %.1fV%.1fH%.1f" fill="none" stroke="#888"/>`+"\n", x0, y0, y0+panelH, x0+panelW)
	for _, v := range []float64{0, top / 2, top} {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%g</text>`+"\n", x0-4, sy(v)+4, v)
	}
	for t := 0.0; t <= end; t += 30 {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%gs</text>`+"\n", sx(t), y0+panelH+14, t)
	}
	// All attempts as an area, admitted ones as a line over it.
	fmt.Fprintf(b, `<path d="%s" fill="#9ec5e8" stroke="#5b9bd5" stroke-width="0.8"/>`+"\n", steps(s.Series, sx, sy, true))
	fmt.Fprintf(b, `<path d="%s" fill="none" stroke="#1f3f73" stroke-width="1.2"/>`+"\n", steps(s.Admitted, sx, sy, false))
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c00" stroke-dasharray="5 3"/>`+"\n",
		x0, sy(r.Capacity), x0+panelW, sy(r.Capacity))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#c00">C</text>`+"\n", x0+panelW+3, sy(r.Capacity)+4)
	if peak := s.Peak.Mean; !math.IsNaN(peak) {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#333">peak after recovery %.1f × C</text>`+"\n",
			x0+panelW, y0-7, peak)
	}
}

// steps is an SVG path of a per-second series drawn as steps; closed makes
// it an area down to zero.
func steps(v []float64, sx, sy func(float64) float64, closed bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "M%.1f %.1f", sx(0), sy(0))
	for i, x := range v {
		fmt.Fprintf(&b, "V%.1fH%.1f", sy(x), sx(float64(i+1)))
	}
	if closed {
		fmt.Fprintf(&b, "V%.1fZ", sy(0))
	}
	return b.String()
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// niceCeil rounds v up to a round number: 1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8
// times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
