package mockllm

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// responses speaks OpenAI's Responses API, POST /v1/responses. Its
// stream's events carry their type as their name and a sequence_number,
// and a background response's events are kept for streaming again (see
// store).
type responses struct{}

// openAIResponse is a Responses API response object, as far as its
// clients read it.
type openAIResponse struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	CreatedAt         int64           `json:"created_at"`
	Status            string          `json:"status"`
	Background        bool            `json:"background"`
	Error             any             `json:"error"`
	IncompleteDetails any             `json:"incomplete_details"`
	Model             string          `json:"model"`
	Output            []responseItem  `json:"output"`
	Store             bool            `json:"store"`
	Usage             *responsesUsage `json:"usage"`
}

type responseItem struct {
	ID      string         `json:"id"`
	Type    string         `json:"type"`
	Status  string         `json:"status"`
	Content []responsePart `json:"content"`
	Role    string         `json:"role"`
}

type responsePart struct {
	Type        string `json:"type"`
	Annotations []any  `json:"annotations"`
	Text        string `json:"text"`
}

type responsesUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// object returns r's response object with this status: with its output
// and usage once completed.
func (responses) object(r *reply, status string) openAIResponse {
	o := openAIResponse{
		ID: r.id, Object: "response", CreatedAt: r.created, Status: status, Background: r.background,
		Model: r.model, Output: []responseItem{}, Store: r.store,
	}
	if status == "completed" {
		o.Output = []responseItem{responses{}.item(r, "completed", r.text())}
		o.Usage = &responsesUsage{InputTokens: r.prompt, OutputTokens: len(r.pieces), TotalTokens: r.prompt + len(r.pieces)}
	}
	return o
}

// item is the answer's message item; text "" gives it no content.
func (responses) item(r *reply, status, text string) responseItem {
	it := responseItem{ID: "msg_" + r.id, Type: "message", Status: status, Content: []responsePart{}, Role: "assistant"}
	if status == "completed" {
		it.Content = []responsePart{{Type: "output_text", Annotations: []any{}, Text: text}}
	}
	return it
}

func (a responses) whole(r *reply) any { return a.object(r, "completed") }

// events returns r's stream, every event in order, made once: a stream
// and its resumption must carry the same bytes.
func (a responses) events(r *reply) []event {
	if r.events != nil {
		return r.events
	}
	var evs []event
	add := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, len(evs)
		evs = append(evs, event{name: typ, data: js(fields)})
	}
	part := func(text string) responsePart {
		return responsePart{Type: "output_text", Annotations: []any{}, Text: text}
	}
	at := func(fields map[string]any) map[string]any {
		fields["item_id"], fields["output_index"], fields["content_index"] = "msg_"+r.id, 0, 0
		return fields
	}
	first := "in_progress"
	if r.background {
		first = "queued"
	}
	add("response.created", map[string]any{"response": a.object(r, first)})
	if r.background {
		add("response.queued", map[string]any{"response": a.object(r, "queued")})
	}
	add("response.in_progress", map[string]any{"response": a.object(r, "in_progress")})
	add("response.output_item.added", map[string]any{"output_index": 0, "item": a.item(r, "in_progress", "")})
	add("response.content_part.added", at(map[string]any{"part": part("")}))
	for i := range r.pieces {
		add("response.output_text.delta", at(map[string]any{"delta": r.word(i), "logprobs": []any{}}))
	}
	add("response.output_text.done", at(map[string]any{"text": r.text(), "logprobs": []any{}}))
	add("response.content_part.done", at(map[string]any{"part": part(r.text())}))
	add("response.output_item.done", map[string]any{"output_index": 0, "item": a.item(r, "completed", r.text())})
	add("response.completed", map[string]any{"response": a.object(r, "completed")})
	r.events = evs
	return evs
}

// headLen is the number of events before the content: response.created,
// response.queued in background, response.in_progress, the item and the
// content part added.
func (responses) headLen(r *reply) int {
	if r.background {
		return 5
	}
	return 4
}

func (a responses) head(r *reply) []event { return a.events(r)[:a.headLen(r)] }

func (a responses) chunk(r *reply, i int) event { return a.events(r)[a.headLen(r)+i] }

func (a responses) tail(r *reply) []event { return a.events(r)[a.headLen(r)+len(r.pieces):] }

func (a responses) malformed(r *reply, i int) event {
	return cutAfter(a.chunk(r, i), `"delta":"`)
}

// failure is the Responses API's error event, in the place of content
// chunk i and with its sequence number.
func (a responses) failure(r *reply, i int) (event, int) {
	return event{name: "error", data: js(map[string]any{
		"type": "error", "code": "server_error", "message": serverErrorMessage, "param": nil,
		"sequence_number": a.headLen(r) + i,
	})}, http.StatusInternalServerError
}

func (responses) errorBody(status int, message string) []byte {
	return openAI{}.errorBody(status, message)
}

// defaultResumeWindow is how long a background response may be streamed
// again when Server.ResumeWindow is zero: about as long as OpenAI's.
const defaultResumeWindow = 5 * time.Minute

// maxStored bounds the background responses a Server keeps.
const maxStored = 10000

// store keeps the background responses a Server made, by id, for
// streaming again and for cancelling.
type store struct {
	mu     sync.Mutex // guards m and order, and each stored's cancelled
	m      map[string]*stored
	order  []string // ids, oldest first
	window time.Duration
}

// stored is one background response, its events made (see put).
type stored struct {
	rep       *reply
	at        time.Time // when it was made
	cancelled bool
}

// put keeps rep, a background response made at now, dropping those past
// the window and the oldest past maxStored.
func (st *store) put(rep *reply, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m == nil {
		st.m = map[string]*stored{}
	}
	for len(st.order) > 0 {
		old := st.m[st.order[0]]
		if len(st.order) < maxStored && now.Sub(old.at) < st.window {
			break
		}
		delete(st.m, st.order[0])
		st.order = st.order[1:]
	}
	// Its events are made now, before any request that streams them
	// again reads them.
	responses{}.events(rep)
	st.m[rep.id] = &stored{rep: rep, at: now}
	st.order = append(st.order, rep.id)
}

// get returns the response id, if it is kept and its window has not
// passed at now.
func (st *store) get(id string, now time.Time) (*stored, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s, ok := st.m[id]
	if !ok || now.Sub(s.at) >= st.window {
		return nil, false
	}
	return s, true
}

// retrieve is GET /v1/responses/{id}: the response object, or with
// stream=true its events again, those after starting_after if given.
func (s *Server) retrieve(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	kept, ok := s.store.get(id, time.Now())
	if !ok {
		s.countOther("/v1/responses/{id}", "404")
		writeJSON(w, http.StatusNotFound, responses{}.errorBody(http.StatusNotFound, fmt.Sprintf("Response with id '%s' not found.", id)))
		return
	}
	q := r.URL.Query()
	if q.Get("stream") != "true" {
		s.countOther("/v1/responses/{id}", "get")
		writeJSON(w, http.StatusOK, js(s.store.object(kept)))
		return
	}
	after := -1
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			s.countOther("/v1/responses/{id}", "400")
			writeJSON(w, http.StatusBadRequest, responses{}.errorBody(http.StatusBadRequest, fmt.Sprintf("Invalid 'starting_after': %q is not a sequence number.", v)))
			return
		}
		after = n
	}
	s.countOther("/v1/responses/{id}", "stream")
	x := &exchange{s: s, w: w, r: r, api: responses{}, rep: kept.rep}
	x.eventStreamHeaders()
	x.writeHeader(http.StatusOK)
	x.flush()
	head := responses{}.headLen(kept.rep)
	for i, ev := range kept.rep.events {
		if i <= after {
			continue
		}
		content := i >= head && i < head+len(kept.rep.pieces)
		if content && !x.wait(s.ChunkDelay) || x.event(ev) != nil {
			return
		}
	}
}

// object returns a kept response's object as it stands: completed, as
// the server made it whole, or cancelled.
func (st *store) object(kept *stored) openAIResponse {
	st.mu.Lock()
	status := "completed"
	if kept.cancelled {
		status = "cancelled"
	}
	st.mu.Unlock()
	return responses{}.object(kept.rep, status)
}

// cancel is POST /v1/responses/{id}/cancel: a background response's
// object, its status cancelled.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	kept, ok := s.store.get(r.PathValue("id"), time.Now())
	if !ok {
		s.countOther("/v1/responses/{id}/cancel", "404")
		writeJSON(w, http.StatusNotFound, responses{}.errorBody(http.StatusNotFound, fmt.Sprintf("Response with id '%s' not found.", r.PathValue("id"))))
		return
	}
	s.store.mu.Lock()
	kept.cancelled = true
	s.store.mu.Unlock()
	s.countOther("/v1/responses/{id}/cancel", "cancelled")
	writeJSON(w, http.StatusOK, js(s.store.object(kept)))
}
