package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/internal/parse"
	"github.com/outlast-llm/outlast/record"
)

// API serves the record as JSON under the gateway's /outlast/ prefix:
//
//	GET /outlast/requests?run=&status=&since=&limit=&cursor=
//	    requests, newest first, each with its attempts, paged by cursor
//	GET /outlast/requests/{id}
//	    one request with its attempts
//	GET /outlast/runs/{run}
//	    a run's requests and their attempts, oldest first: each failure,
//	    the wait that followed and the next attempt
//	GET /outlast/upstreams/states?upstream=&since=&limit=
//	    the newest changes of the upstreams' admission states, newest
//	    last: when each went down, was probed, recovered and was healthy
//
// A list of requests is always an object with the list under "requests":
// {"requests": […], "next": "…"} for a page, where next is the cursor of
// the next page and is left out after the last one, and {"run": "…",
// "requests": […]} for a run. A request is the record's JSON form (see
// package record). State changes are {"states": [{"upstream": "…", "at":
// "…", "from": "down", "to": "probing"}, …]}, at in the record's form of
// a time.
//
// Errors are the gateway's own, in one shape: an Outlast-Error header
// naming the kind and {"type":"error","error":{"type":"outlast_KIND",
// "message":"…"}}. A bad query parameter or cursor gets 400, kind invalid,
// naming it, as does a run too long to return at once (more than
// MaxRun requests, to be paged through with the list's run parameter);
// an unknown request or run gets 404, kind not-found; a method
// other than GET or HEAD gets 405, kind method; a journal that cannot be
// read gets 500, kind internal, and one that does not answer within
// ReadTimeout 504, kind timeout. With no store (the journal is off), every
// endpoint answers 404, kind not-found, saying so.
type API struct {
	// Store is where the record is read. Nil means the journal is off.
	Store Store
}

// Endpoints returns the API's handlers, keyed for gateway.Config.Endpoints.
func (a *API) Endpoints() map[string]http.Handler {
	return map[string]http.Handler{
		"requests":  bounded(a.list),
		"requests/": bounded(a.get),
		"runs/":     bounded(a.run),
		// Under upstreams/, which leaves room for more of an upstream.
		"upstreams/states": bounded(a.states),
	}
}

// ReadTimeout bounds a read of the API's store: a database that stopped
// answering gets the reader a 504, and does not hold a connection's
// handler (or the gateway's shutdown, which waits for handlers) for as
// long as it does not answer.
const ReadTimeout = 10 * time.Second

func bounded(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), ReadTimeout)
		defer cancel()
		h(w, r.WithContext(ctx))
	})
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	if !a.ready(w, r) {
		return
	}
	q, err := parseQuery(r.URL.Query())
	if err != nil {
		apierr.Write(w, http.StatusBadRequest, apierr.Invalid, err.Error())
		return
	}
	page, err := a.Store.List(r.Context(), q)
	if err != nil {
		a.storeError(w, err)
		return
	}
	writeJSON(w, page)
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	if !a.ready(w, r) {
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/outlast/requests/")
	rec, err := a.Store.Get(r.Context(), id)
	if err != nil {
		a.storeError(w, err)
		return
	}
	writeJSON(w, rec)
}

func (a *API) run(w http.ResponseWriter, r *http.Request) {
	if !a.ready(w, r) {
		return
	}
	run, err := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/outlast/runs/"))
	if err != nil || run == "" {
		apierr.Write(w, http.StatusBadRequest, apierr.Invalid, "outlast: the run in the path is missing or badly escaped")
		return
	}
	recs, err := a.Store.Run(r.Context(), run)
	if err != nil {
		a.storeError(w, err)
		return
	}
	writeJSON(w, struct {
		Run      string           `json:"run"`
		Requests []record.Request `json:"requests"`
	}{run, recs})
}

func (a *API) states(w http.ResponseWriter, r *http.Request) {
	if !a.ready(w, r) {
		return
	}
	q, err := parseStateQuery(r.URL.Query())
	if err != nil {
		apierr.Write(w, http.StatusBadRequest, apierr.Invalid, err.Error())
		return
	}
	changes, err := a.Store.States(r.Context(), q)
	if err != nil {
		a.storeError(w, err)
		return
	}
	out := struct {
		States []stateJSON `json:"states"`
	}{make([]stateJSON, len(changes))}
	for i, c := range changes {
		out.States[i] = stateJSON{
			Upstream: c.Upstream,
			At:       string(appendTime(nil, c.At)),
			From:     c.From.String(),
			To:       c.To.String(),
		}
	}
	writeJSON(w, out)
}

// stateJSON is a state change's JSON form: its time as the record's JSON
// writes times, its states by name.
type stateJSON struct {
	Upstream string `json:"upstream"`
	At       string `json:"at"`
	From     string `json:"from"`
	To       string `json:"to"`
}

// ready answers for a journal that is off or a method other than GET.
func (a *API) ready(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD")
		apierr.Write(w, http.StatusMethodNotAllowed, apierr.Method, "outlast: the record is read with GET")
		return false
	case a.Store == nil:
		apierr.Write(w, http.StatusNotFound, apierr.NotFound, "outlast: the journal is off (--journal off)")
		return false
	}
	return true
}

func (a *API) storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		apierr.Write(w, http.StatusNotFound, apierr.NotFound, err.Error())
	case errors.Is(err, ErrBadCursor), errors.Is(err, ErrInvalid), errors.Is(err, ErrRunTooLong):
		apierr.Write(w, http.StatusBadRequest, apierr.Invalid, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		apierr.Write(w, http.StatusGatewayTimeout, apierr.Timeout, fmt.Sprintf("outlast: the journal did not answer within %v", ReadTimeout))
	default:
		apierr.Write(w, http.StatusInternalServerError, apierr.Internal, "outlast: reading the journal: "+err.Error())
	}
}

// parseQuery reads List's parameters, naming the one that is wrong.
func parseQuery(v url.Values) (Query, error) {
	q := Query{Run: v.Get("run"), Cursor: v.Get("cursor")}
	if err := knownKeys(v, "run", "status", "since", "limit", "cursor"); err != nil {
		return q, err
	}
	if s := v.Get("status"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 || n > 599 {
			return q, fmt.Errorf("outlast: status %q: want an HTTP status such as 503", s)
		}
		q.Status = n
	}
	var err error
	q.Since, q.Limit, err = sinceAndLimit(v)
	return q, err
}

// parseStateQuery reads States' parameters, naming the one that is wrong.
func parseStateQuery(v url.Values) (StateQuery, error) {
	q := StateQuery{Upstream: v.Get("upstream")}
	if err := knownKeys(v, "upstream", "since", "limit"); err != nil {
		return q, err
	}
	var err error
	q.Since, q.Limit, err = sinceAndLimit(v)
	return q, err
}

// knownKeys returns an error naming the first parameter of v not in keys,
// and listing keys.
func knownKeys(v url.Values, keys ...string) error {
	for key := range v {
		if !slices.Contains(keys, key) {
			want := strings.Join(keys[:len(keys)-1], ", ") + " or " + keys[len(keys)-1]
			return fmt.Errorf("outlast: unknown query parameter %q (want %s)", key, want)
		}
	}
	return nil
}

// sinceAndLimit reads the since and limit parameters, zero when absent.
func sinceAndLimit(v url.Values) (since time.Time, limit int, err error) {
	if s := v.Get("since"); s != "" {
		if since, err = parseSince(s); err != nil {
			return since, 0, fmt.Errorf("outlast: since %q: want an RFC 3339 time or a duration ago such as 15m", s)
		}
	}
	if s := v.Get("limit"); s != "" {
		if limit, err = parseLimit(s); err != nil {
			return since, 0, err
		}
	}
	return since, limit, nil
}

// parseLimit reads a limit parameter.
func parseLimit(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, fmt.Errorf("outlast: limit %q: want a whole number from 1 to %d", s, MaxLimit)
	}
	return n, nil
}

// parseSince reads an RFC 3339 time, or a duration before now.
func parseSince(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := parse.Duration(s)
	if err != nil || d < 0 {
		return time.Time{}, errors.New("bad since")
	}
	return time.Now().Add(-d), nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
