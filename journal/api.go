package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// API serves the record as JSON under the gateway's /outlast/ prefix:
//
//	GET /outlast/requests?run=&status=&since=&limit=&cursor=
//	    requests, newest first, each with its attempts, paged by cursor
//	GET /outlast/requests/{id}
//	    one request with its attempts
//	GET /outlast/runs/{run}
//	    a run's requests and their attempts, oldest first: seed 000's
//	    view of a run
//
// A bad query parameter gets 400 with an error naming it. With no store
// (the journal is off), every endpoint answers 404 saying so.
type API struct {
	// Store is where the record is read. Nil means the journal is off.
	Store Store
}

// Endpoints returns the API's handlers, keyed for gateway.Config.Endpoints.
func (a *API) Endpoints() map[string]http.Handler {
	return map[string]http.Handler{
		"requests":  http.HandlerFunc(a.list),
		"requests/": http.HandlerFunc(a.get),
		"runs/":     http.HandlerFunc(a.run),
	}
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	if !a.ready(w, r) {
		return
	}
	q, err := parseQuery(r.URL.Query())
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
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
		apiError(w, http.StatusBadRequest, "outlast: the run in the path is missing or badly escaped")
		return
	}
	recs, err := a.Store.Run(r.Context(), run)
	if err != nil {
		a.storeError(w, err)
		return
	}
	writeJSON(w, struct {
		Run      string   `json:"run"`
		Requests []Record `json:"requests"`
	}{run, recs})
}

// ready answers for a journal that is off or a method other than GET.
func (a *API) ready(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD")
		apiError(w, http.StatusMethodNotAllowed, "outlast: the record is read with GET")
		return false
	case a.Store == nil:
		apiError(w, http.StatusNotFound, "outlast: the journal is off (--journal off)")
		return false
	}
	return true
}

func (a *API) storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		apiError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrBadCursor), errors.Is(err, ErrInvalid):
		apiError(w, http.StatusBadRequest, err.Error())
	default:
		apiError(w, http.StatusInternalServerError, "outlast: reading the journal: "+err.Error())
	}
}

// parseQuery reads List's parameters, naming the one that is wrong.
func parseQuery(v url.Values) (Query, error) {
	q := Query{Run: v.Get("run"), Cursor: v.Get("cursor")}
	for key := range v {
		switch key {
		case "run", "status", "since", "limit", "cursor":
		default:
			return q, fmt.Errorf("outlast: unknown query parameter %q (want run, status, since, limit or cursor)", key)
		}
	}
	if s := v.Get("status"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 || n > 599 {
			return q, fmt.Errorf("outlast: status %q: want an HTTP status such as 503", s)
		}
		q.Status = n
	}
	if s := v.Get("since"); s != "" {
		t, err := parseSince(s)
		if err != nil {
			return q, fmt.Errorf("outlast: since %q: want an RFC 3339 time or a duration ago such as 15m", s)
		}
		q.Since = t
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			return q, fmt.Errorf("outlast: limit %q: want a whole number from 1 to %d", s, MaxLimit)
		}
		q.Limit = n
	}
	return q, nil
}

// parseSince reads an RFC 3339 time, or a duration before now.
func parseSince(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
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

// apiError writes an error in the OpenAI shape, as the gateway's own are.
func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e.Type, e.Error.Type, e.Error.Message = "error", "invalid_request_error", msg
	json.NewEncoder(w).Encode(e)
}
