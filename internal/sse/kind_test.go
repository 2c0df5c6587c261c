package sse

import (
	"bytes"
	"testing"
)

// kindCases are events as the providers send them, each with its kind
// and, for a failure, the status a policy judges it by.
var kindCases = []struct {
	why, name, data string
	kind            Kind
	status          int
}{
	// Anthropic: the preamble, then content.
	{"message_start carries no text", "message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":12,"output_tokens":1}}}`, Preamble, 0},
	{"a ping carries nothing", "ping", `{"type": "ping"}`, Preamble, 0},
	{"an empty text block's start", "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, Preamble, 0},
	{"an empty thinking block's start", "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`, Preamble, 0},
	{"a tool use names its tool", "content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`, Content, 0},
	{"a text delta", "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`, Content, 0},
	{"a thinking delta is reasoning", "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}`, Content, 0},
	{"message_stop ends it", "message_stop", `{"type":"message_stop"}`, End, 0},
	{"Anthropic's overload under load", "error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, Failure, 529},
	{"Anthropic's error, unnamed", "", `{"type":"error","error":{"type":"rate_limit_error","message":"x"}}`, Failure, 429},
	{"an event named error with no JSON", "error", `not json`, Failure, 500},

	// OpenAI's chat chunks.
	{"the role chunk", "", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`, Preamble, 0},
	{"llama.cpp's role chunk, content null", "", `{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"chatcmpl-x","model":"m","object":"chat.completion.chunk"}`, Preamble, 0},
	{"Azure's prompt filter results come first", "", `{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}`, Preamble, 0},
	{"a content chunk, as Python writes JSON", "", `{"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]}`, Content, 0},
	{"the role chunk, as Python writes JSON", "", `{"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}`, Preamble, 0},
	{"a content chunk", "", `{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`, Content, 0},
	{"a tool call", "", `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}}]}`, Content, 0},
	{"reasoning, as vLLM names it", "", `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"Hmm"}}]}`, Content, 0},
	{"a refusal", "", `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"refusal":"I can't"}}]}`, Content, 0},
	{"an empty answer's finish", "", `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, Content, 0},
	{"the usage chunk", "", `{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`, Content, 0},
	{"a legacy completion's text", "", `{"object":"text_completion","choices":[{"text":"Hi","index":0,"finish_reason":null}]}`, Content, 0},
	{"[DONE]", "", `[DONE]`, End, 0},
	{"OpenAI's error chunk", "", `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`, Failure, 500},
	{"a rate limit named by its code", "", `{"error":{"message":"x","type":"requests","code":"rate_limit_exceeded"}}`, Failure, 429},
	{"llama.cpp's error: its code a status", "", `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, Failure, 503},
	{"an error that is null is none", "", `{"id":"c","object":"chat.completion.chunk","error":null,"choices":[{"index":0,"delta":{"content":"x"}}]}`, Content, 0},

	// The Responses API.
	{"response.created", "response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","error":null,"output":[]}}`, Preamble, 0},
	{"response.queued, in background", "response.queued", `{"type":"response.queued","sequence_number":1,"response":{"id":"resp_1","status":"queued"}}`, Preamble, 0},
	{"response.in_progress", "response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","status":"in_progress","error":null}}`, Preamble, 0},
	{"a message item added empty", "response.output_item.added", `{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"},"sequence_number":2}`, Preamble, 0},
	{"a reasoning item added empty", "response.output_item.added", `{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]},"sequence_number":2}`, Preamble, 0},
	{"a function call item names its function", "response.output_item.added", `{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_1","type":"function_call","name":"f","arguments":"","call_id":"call_1"},"sequence_number":2}`, Content, 0},
	{"an empty content part", "response.content_part.added", `{"type":"response.content_part.added","item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]},"sequence_number":3}`, Preamble, 0},
	{"a text delta", "response.output_text.delta", `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","sequence_number":4}`, Content, 0},
	{"response.completed ends it", "response.completed", `{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","status":"completed","error":null}}`, End, 0},
	{"response.incomplete is the API's own end", "response.incomplete", `{"type":"response.incomplete","sequence_number":9,"response":{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}`, End, 0},
	{"the error event: its code at the top", "error", `{"type":"error","code":"server_error","message":"The server had an error","param":null,"sequence_number":1}`, Failure, 500},
	{"insufficient quota is OpenAI's 429", "error", `{"type":"error","code":"insufficient_quota","message":"You exceeded your current quota","param":null,"sequence_number":1}`, Failure, 429},
	{"response.failed: the response's error", "response.failed", `{"type":"response.failed","sequence_number":5,"response":{"id":"resp_1","status":"failed","error":{"code":"rate_limit_exceeded","message":"x"}}}`, Failure, 429},

	// What outlast does not know is content: it commits.
	{"llama.cpp's native chunk", "", `{"content":"Hi","stop":false,"id_slot":0}`, Content, 0},
	{"Gemini's chunk", "", `{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"}}]}`, Content, 0},
	{"not JSON", "", `hello`, Content, 0},
}

func TestKindOf(t *testing.T) {
	t.Parallel()
	for _, c := range kindCases {
		ev := &Event{Name: []byte(c.name), Data: []byte(c.data), HasData: true}
		if got := KindOf(ev); got != c.kind {
			t.Errorf("%s: KindOf(%s %s) = %v, want %v", c.why, c.name, c.data, got, c.kind)
		}
		if got := IsFailure(ev); got != (c.kind == Failure) {
			t.Errorf("%s: IsFailure = %v, want %v", c.why, got, c.kind == Failure)
		}
		if c.kind != Failure {
			continue
		}
		if typ, status := ErrorOf(ev); status != c.status || typ == "" {
			t.Errorf("%s: ErrorOf = %q, %d; want a type and %d", c.why, typ, status, c.status)
		}
	}
}

// FuzzKind checks, for any event, that IsFailure and IsEnd, which skip
// decoding data that names no error or end, agree with KindOf, and that a failure's
// status is one a policy can judge.
func FuzzKind(f *testing.F) {
	for _, c := range kindCases {
		f.Add(c.name, []byte(c.data))
	}
	// Keys in another case, or escaped: not the keys the APIs write, and
	// no failure to either reading.
	f.Add("", []byte(`{"ERROR":{"type":"OVERLOADED"}}`))
	f.Add("", []byte(`{"\u0065rror":{"type":"rate_limit_error"}}`))
	f.Add("", []byte(`{"type":"response.FAILED"}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		ev := &Event{Name: []byte(name), Data: data, HasData: true}
		k := KindOf(ev)
		if IsFailure(ev) != (k == Failure) {
			t.Fatalf("event %q %q: KindOf %v, IsFailure %v", name, data, k, IsFailure(ev))
		}
		if IsFailureName(ev.Name) && k != Failure {
			t.Fatalf("event %q %q: IsFailureName, but KindOf %v", name, data, k)
		}
		if IsEnd(ev) != (k == End) {
			t.Fatalf("event %q %q: KindOf %v, IsEnd %v", name, data, k, IsEnd(ev))
		}
		Finishes(ev) // reads any data, to its end
		if EndsWithEvent(ev) && !bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{")) {
			t.Fatalf("event %q %q: EndsWithEvent of data that is no JSON object", name, data)
		}
		if k == Failure {
			if typ, status := ErrorOf(ev); status < 400 || status > 599 || typ == "" {
				t.Fatalf("event %q %q: ErrorOf = %q, %d; want a type and a 4xx or 5xx", name, data, typ, status)
			}
		}
	})
}

// EndsWithEvent tells, from a stream's first event with data, the APIs
// whose streams end with an event of their own from those outlast does
// not know.
func TestEndsWithEvent(t *testing.T) {
	for _, c := range []struct {
		why, name, data string
		want            bool
	}{
		{"OpenAI's role chunk", "", `{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, true},
		{"Azure's prompt filter results, object empty", "", `{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[]}`, true},
		{"a legacy completion", "", `{"object":"text_completion","choices":[{"text":"Hi","index":0}]}`, true},
		{"Anthropic's message_start", "message_start", `{"type":"message_start","message":{"id":"msg_1","content":[]}}`, true},
		{"Anthropic's message_start, unnamed", "", `{"type":"message_start","message":{"id":"msg_1","content":[]}}`, true},
		{"the Responses API's response.created", "response.created", `{"type":"response.created","response":{"id":"resp_1"}}`, true},
		{"a background response's response.queued", "response.queued", `{"type":"response.queued","response":{"id":"resp_1"}}`, true},
		{"llama.cpp's native chunk", "", `{"content":"Hi","stop":false,"id_slot":0}`, false},
		{"Gemini's chunk", "", `{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"}}]}`, false},
		{"a choices key inside text", "", `{"content":"\"choices\":[]"}`, false},
		{"not JSON", "", `hello`, false},
	} {
		ev := &Event{Name: []byte(c.name), Data: []byte(c.data), HasData: true}
		if got := EndsWithEvent(ev); got != c.want {
			t.Errorf("%s: EndsWithEvent = %v, want %v", c.why, got, c.want)
		}
	}
}

// Finishes finds the answer's finish in an OpenAI chunk or Anthropic's
// message_delta, as the servers write them, and nowhere else.
func TestFinishes(t *testing.T) {
	for _, c := range []struct {
		why, data string
		want      bool
	}{
		{"a finish chunk", `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, true},
		{"as Python writes JSON", `{"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}`, true},
		{"a content chunk", `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`, false},
		{"Anthropic's message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`, true},
		{"message_start's stop_reason is null", `{"type":"message_start","message":{"id":"msg_1","stop_reason":null}}`, false},
		{"the key inside text", `{"choices":[{"delta":{"content":"say \"finish_reason\":\"stop\""},"finish_reason":null}]}`, false},
		{"the key at the end", `{"finish_reason"`, false},
	} {
		if got := Finishes(&Event{Data: []byte(c.data), HasData: true}); got != c.want {
			t.Errorf("%s: Finishes = %v, want %v", c.why, got, c.want)
		}
	}
}

// KindOf, IsFailure and IsEnd read an event without allocating: a relay
// asks the last two of every event it forwards.
func TestKindOfAllocs(t *testing.T) {
	for _, c := range kindCases {
		ev := &Event{Name: []byte(c.name), Data: []byte(c.data), HasData: true}
		for _, f := range []struct {
			name string
			read func()
		}{
			{"KindOf", func() { KindOf(ev) }},
			{"IsFailure", func() { IsFailure(ev) }},
			{"IsEnd", func() { IsEnd(ev) }},
		} {
			if n := testing.AllocsPerRun(100, f.read); n != 0 {
				t.Errorf("%s: %s allocates %v times, want 0", c.why, f.name, n)
			}
		}
	}
}

// BenchmarkKindOf measures KindOf, and IsFailure and IsEnd, which a relay
// asks of every event it forwards, for the usual events of each API and
// an error.
func BenchmarkKindOf(b *testing.B) {
	for _, e := range []struct{ name, event, data string }{
		{"openai-text", "", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}`},
		{"anthropic-delta", "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`},
		{"responses-delta", "response.output_text.delta", `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello","sequence_number":4}`},
		{"error", "", `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`},
	} {
		ev := &Event{Name: []byte(e.event), Data: []byte(e.data), HasData: true}
		for _, f := range []struct {
			name string
			read func(*Event) bool
		}{
			{"KindOf", func(ev *Event) bool { return KindOf(ev) == Content }},
			{"IsFailure", IsFailure},
			{"IsEnd", IsEnd},
		} {
			b.Run(e.name+"/"+f.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					f.read(ev)
				}
			})
		}
	}
}
