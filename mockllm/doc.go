// Package mockllm is a fake LLM provider that fails on cue: a server that
// speaks OpenAI's chat completions and Responses API, Anthropic's
// messages and llama.cpp's completion well enough for their clients, and answers each request as a script of faults says. It is
// for testing how a host behaves in an outage.
//
// NewServer gives a Go test a server on a loopback port, as
// httptest.NewServer does, running the same scripts as the "outlast mock"
// command:
//
//	srv := mockllm.NewServer("502x2,ok")
//	defer srv.Close()
//	// srv.URL+"/v1/chat/completions" fails twice with 502, then succeeds.
//
// For other settings, fill in a Server and call Start.
//
// # Endpoints
//
// The model endpoints follow the script; each request takes the current
// step, in the order the requests arrive:
//
//   - POST /v1/chat/completions, OpenAI's chat completions: a
//     chat.completion with usage, or with "stream": true, chunks of
//     chat.completion.chunk (the first with the assistant role, the last
//     with finish_reason "stop", then the usage if stream_options asks
//     for it), then "data: [DONE]".
//   - POST /v1/messages, Anthropic's messages: a message, or with
//     "stream": true, the events message_start, content_block_start,
//     content_block_delta for each chunk, content_block_stop,
//     message_delta and message_stop.
//   - POST /completion, llama.cpp's native completion: its JSON (content,
//     stop, id_slot, tokens_predicted, …), or with "stream": true one
//     data event per chunk and a last one with "stop": true. The body's
//     id_slot asks for a slot (see Server.Slots); -1 or none means any.
//   - POST /v1/responses, OpenAI's Responses API: a response object with
//     one message item and usage, or with "stream": true the events
//     response.created, response.in_progress, response.output_item.added,
//     response.content_part.added, response.output_text.delta for each
//     chunk, response.output_text.done, response.content_part.done,
//     response.output_item.done and response.completed, each named as its
//     type and numbered by its sequence_number from 0. With
//     "background": true the server keeps the response for
//     Server.ResumeWindow (5 minutes by default): its stream has
//     response.queued after response.created, a request that is not a
//     stream is answered at once with the response queued, and however
//     the step cuts the stream, its events can be had again (below).
//
// The text is always "The quick brown fox jumps over the lazy dog." cut
// into words, one a chunk, repeated or cut to Server.Chunks chunks: the
// canonical text. A body that is not JSON gets a 400 in the API's error
// shape.
//
// A chat request (OpenAI's or Anthropic's) whose last message is the
// assistant's carries a prefill: the text the answer must continue. If
// that text, less its trailing whitespace (which Anthropic refuses), is
// a prefix of the canonical text, the answer is the rest of it, starting
// with the rest of a word if the prefill ends inside one, so that prefill
// and answer make the whole text; otherwise the answer is the whole text,
// as without a prefill. Server.RefusePrefill, or the refuse-prefill
// parameter on a step, makes such a request get 400 in the API's error
// shape instead, saying that the model does not support assistant
// message prefill, as some models answer.
//
// The other endpoints take no step and are not counted:
//
//   - GET /health, llama.cpp's: {"status":"ok"}, or while a loading step
//     is current, 503 {"error":{"code":503,"message":"Loading model",
//     "type":"unavailable_error"}}.
//   - GET /slots, llama.cpp's: one entry per slot, with id, id_task and
//     is_processing.
//   - GET /mock/stats: the Stats as JSON, as in
//     {"total":5,"paths":{"/v1/chat/completions":{"502":2,"ok":3}}}.
//   - GET /v1/responses/{id}, a background response: its object, or with
//     stream=true its stream again, byte for byte as the first sent it,
//     from the start or after the event numbered starting_after, with
//     ChunkDelay before each content event. Past the window, or for a
//     response not made in background, 404 in OpenAI's error shape.
//   - POST /v1/responses/{id}/cancel: the background response's object,
//     its status cancelled.
//
// Any other path or method gets a JSON 404 in OpenAI's error shape that
// names it.
//
// # Scripts
//
// A script is steps separated by commas or newlines; "#" starts a comment
// that runs to the end of the line, so a script file can hold one step a
// line with notes. Each request takes the current step. A step applies to
// one request, or to N requests with xN, or to every request during a
// window with "for D". The last step repeats forever: "502x2,ok" is two
// 502s then success, and "503" alone is always 503. No script at all
// means every request succeeds.
//
// A window is measured from when its step became current. After a window,
// the next step becomes current when the window ends, whether or not a
// request came, so that windows add up to a timeline: in
// "502 for 30s,503 for 10s,ok" the 503s end 40 s after the first step
// began. A step after counted steps becomes current when the last
// counted request came. The first step becomes current when the server starts
// (Server.Start, or "outlast mock" starting), so a host that takes 3 s to
// start misses all of "429 for 2s". Set Server.FromFirstRequest, or pass
// --from-first-request to "outlast mock", to have it become current at
// the first model request instead. A first step that refuses starts with
// the server all the same, since no request can reach a closed socket.
//
// A step is a fault, then parameters, each after a colon, then a count or
// a window:
//
//	step      = fault [ "=" arg ] { ":" param } [ " " ] [ "x" N | " for " D ]
//	param     = key "=" value | flag | arg
//
// The faults:
//
//	ok                   a completion
//	200…599              that status; its body is the body parameter, or for
//	                     400 and above the API's error object
//	overloaded           Anthropic's 529, {"type":"error","error":
//	                     {"type":"overloaded_error","message":"Overloaded"}}
//	overloaded-stream    a 200 event stream whose first event is that error,
//	                     as "event: error"
//	loading              llama.cpp's 503 "Loading model" (see GET /health)
//	refuse:D             connections refused for D: the server closes its
//	                     socket, then listens again on the same address, as
//	                     a restart would (see below)
//	reset                the connection reset (TCP RST) before any response
//	close-after-headers  a 200's headers, then the connection closed
//	stall                a 200's headers, then nothing until the client gives
//	                     up
//	stall-after=N        N content chunks, then nothing (with resume=D,
//	                     nothing for D, then the rest and the end)
//	reset-after=N        N content chunks, then a reset
//	malformed-after=N    N content chunks, then one event cut short inside
//	                     its JSON, then the rest and the end
//	error-after=N        N content chunks, then the API's error event, and the
//	                     stream's end (a request that is not a stream gets
//	                     the error as the response it stands for)
//	no-done              the whole stream but its last event: OpenAI's
//	                     [DONE], Anthropic's message_stop
//	slow-headers=D       a completion whose headers wait D
//
// A step's own argument (N or D) follows "=" or a colon: refuse:5s and
// refuse=5s are the same. The parameters:
//
//	retry-after=S        Retry-After: S, in seconds
//	retry-after-date=S   Retry-After as an HTTP-date S seconds ahead, rounded
//	                     up to the second
//	retry-after-ms=MS    Retry-After-Ms: MS, as OpenAI and Anthropic send it
//	header=NAME=VALUE    a response header; it replaces the server's own
//	                     header of that name, and may be given more than once
//	body=VALUE           a status step's body
//	delay=D              a wait before answering (slow-headers has its own)
//	first-token-delay=D  the status line and headers at once, then nothing
//	                     for D, not even the events before the content
//	resume=D             stall-after's silence ends after D
//	refuse-prefill       400 to a request with an assistant prefill
//	ignore-prefill       a prefill answered with the whole text, from the
//	                     start, as a server that does not continue one
//
// Every fault but refuse and reset takes the headers; body is for a
// status only; first-token-delay is for ok, stall-after, reset-after,
// malformed-after, error-after and no-done; resume is for stall-after;
// refuse-prefill and ignore-prefill, which take no value, are for any
// step but refuse. A parameter the grammar does not know is an error
// that names it and lists these. N and S are whole numbers. D is a
// duration as outlast serve reads one: a Go duration, as 200ms, 1.5s or
// 2m; whole days first, as 7d or 1d12h; or a bare number of seconds, as
// 20 or 1.5, as Retry-After counts them. A value is bare (up to a comma,
// colon, "#" or space), a balanced {…} or […], which may hold commas and
// colons as JSON does, or a Go string literal in double quotes. After a
// bare value, put a space before xN, which would otherwise be read as
// part of it. Examples:
//
//	503                                    always 503
//	502x3,ok                               three 502s, then success
//	429:retry-after=1x2,ok                 two 429s with Retry-After: 1
//	500:body={"error":"x"}:header=X-Foo=bar
//	500:body="not json, as text" x2
//	502 for 30s,429:retry-after-ms=1500 for 10s,ok
//	503 for 20,ok                          20 s of 503s (bare seconds), then success
//	refuse:5s,ok                           down 5 s from the start, then up
//	ok x3,reset,stall-after=2,ok
//	ok:first-token-delay=20s               headers at once, the first token 20 s later
//	stall-after=20:resume=30s              20 chunks, 30 s of silence, the rest
//	malformed-after=30,no-done,ok:refuse-prefill
//
// A script parses to a Script; its String form is canonical, with each
// D a Go duration ("503 for 20s"), and parses back to an equal Script. A
// script that does not parse yields a *ScriptError naming the step, its
// position and the problem.
//
// # Faults in detail
//
// error-after=N sends a stream's events before the content (OpenAI's
// role chunk; Anthropic's message_start and content_block_start; the
// Responses API's response.created and the rest up to its content part),
// N content events, and then the error event the API sends when it fails
// mid-answer, and ends the stream cleanly: OpenAI's and llama.cpp's error
// object as data, Anthropic's overloaded_error as "event: error", the
// Responses API's "event: error" with code server_error and the next
// sequence number. error-after=0 is an error after the preamble, before
// any of the answer, as Anthropic sends under load.
//
// Faults that cut a response short (stall-after, reset-after) count
// content chunks: a stream first gets the events before the content
// (OpenAI's role chunk; Anthropic's message_start and
// content_block_start), then N content events, and never the events that
// end it; with N of Chunks or more, all the content goes out but the
// stream never ends. A non-streaming body is cut into Chunks parts of the
// same size for them, so that the client gets the first N parts of the
// JSON. With resume=D, stall-after's silence ends after D: the rest of
// the content events, or of the body's parts, follow, and the response
// ends as a whole one does.
//
// malformed-after=N counts content chunks too. After N of them a stream
// gets one more event, the next content chunk's, cut just after the
// opening quote of its text, as in
//
//	data: {"id":"chatcmpl-mock-1",…,"choices":[{"index":0,"delta":{"content":"
//
// (Anthropic's keeps its content_block_delta name), then every content
// chunk as usual, so that the text is whole, and the events that end the
// stream. A client that skips the event it cannot parse gets the whole
// answer; a strict one fails there. A non-streaming body has no event to
// break: it is cut after its first N parts, at most all but its last
// byte, and ends cleanly there, with a Content-Length that matches, as a
// proxy that truncated it would send.
//
// no-done sends the whole stream, with its finish_reason or stop_reason
// and, if asked for, OpenAI's usage chunk, but leaves out its last event
// (OpenAI's data: [DONE], Anthropic's message_stop, llama.cpp's result
// with "stop": true) and ends the body cleanly. A non-streaming body has
// no such event: it is whole, as for ok.
//
// first-token-delay=D sends the status line and headers at once, then
// nothing at all for D, since a real server sends its first event (such
// as OpenAI's role chunk or Anthropic's message_start) only when the
// model begins; then the answer as the fault says. A non-streaming body
// follows D after its headers.
//
// A refuse step closes the socket when it becomes current, and with it
// every idle connection; a response in progress finishes, with
// "Connection: close". New connections are refused by the kernel until
// the step's time is up, and the server cannot count them: Stats counts
// as "refused" only requests that came during the step on a connection
// opened before it, which the server resets. A script that ends with a
// refuse step ends up, with every request succeeding, since a refuse step
// is a restart. The address is bound again when the step ends; if some
// other process took the port meanwhile, the server logs it and tries
// again.
//
// Requests that generate a completion (ok, slow-headers, stall,
// stall-after, reset-after, malformed-after, error-after, no-done and
// close-after-headers) hold a slot while they run when Server.Slots is
// set; error responses do not. A request refused for its prefill counts
// as "400" in Stats, as does a body that is not JSON.
//
// Server.Limits gives each API key a provider's rate limits, requests
// and tokens per window, with the API's rate-limit headers on every
// answer; a request that generates and does not fit gets 429 with
// Retry-After, counted as "rate-limited" in Stats. See [Limits].
package mockllm
