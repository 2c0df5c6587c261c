package gateway

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/outlast-llm/outlast/internal/jsonscan"
)

// The splice reads every event of a stream it carries, before the event
// goes on: what it reads is on the path of each chunk. It reads them with
// jsonscan, without encoding/json's allocations, where it can be sure to
// read them as json.Unmarshal would: a valid text, each field it knows
// written as that field's exact key, once, with a value of the type the
// field takes. Anything else (a key encoding/json would match by case or
// by an escape, a key given twice, a value of another type) is read by
// json.Unmarshal itself, as before.

// oaChunk is what the splice reads of a chat.completion.chunk.
type oaChunk struct {
	ID      string // read only when asked for
	Error   []byte // the error member's value, if any, as it came
	Choices []oaChoice
}

// reset empties c, keeping its choices' array.
func (c *oaChunk) reset() { c.ID, c.Error, c.Choices = "", nil, c.Choices[:0] }

// oaChoice is one of a chunk's choices, with its delta.
type oaChoice struct {
	Index        int
	Content      string
	HasContent   bool   // content is there and not null
	ToolCalls    []byte // as it came
	FunctionCall []byte
	Reasoning    bool // reasoning_content or reasoning is a string that is not empty
	Finished     bool // finish_reason is there and not null
}

// readOAChunk reads data into c, which it empties first, reusing its
// choices' room. It reads the id only if withID.
func readOAChunk(data []byte, c *oaChunk, withID bool) error {
	c.reset()
	if scanOAChunk(data, c, withID) {
		return nil
	}
	c.reset()
	var j oaChunkJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	j.into(c)
	return nil
}

// oaChunkJSON is oaChunk as encoding/json reads it.
type oaChunkJSON struct {
	ID      string          `json:"id"`
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role             string          `json:"role"`
			Content          *string         `json:"content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
			FunctionCall     json.RawMessage `json:"function_call"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

func (j *oaChunkJSON) into(c *oaChunk) {
	c.ID, c.Error = j.ID, j.Error
	for _, ch := range j.Choices {
		d := ch.Delta
		o := oaChoice{
			Index:        ch.Index,
			HasContent:   d.Content != nil,
			ToolCalls:    d.ToolCalls,
			FunctionCall: d.FunctionCall,
			Reasoning:    d.ReasoningContent != nil && *d.ReasoningContent != "" || d.Reasoning != nil && *d.Reasoning != "",
			Finished:     ch.FinishReason != nil,
		}
		if d.Content != nil {
			o.Content = *d.Content
		}
		c.Choices = append(c.Choices, o)
	}
}

// scanOAChunk reads data into c, and reports whether data is a valid JSON
// text that it could be sure to read as json.Unmarshal would.
func scanOAChunk(data []byte, c *oaChunk, withID bool) bool {
	return scanChunk(data, c, withID, nil, nil)
}

// scanFirst is scanOAChunk for a stream's first event, whose API is not
// known yet: it also reads the object and the type of any event, as
// scanProbe does, in the same walk. It empties c first.
func scanFirst(data []byte, c *oaChunk, withID bool, object, typ *string) bool {
	c.reset()
	return scanChunk(data, c, withID, object, typ)
}

// chunkKeys are the keys scanChunk reads: a chunk's, and the probe's.
var chunkKeys = [...]string{"id", "error", "choices", "object", "type"}

// scanChunk reads data into c, and the object and the type into *object
// and *typ unless object is nil.
func scanChunk(data []byte, c *oaChunk, withID bool, object, typ *string) bool {
	id := &c.ID
	if !withID {
		id = nil
	}
	names := chunkKeys[:3]
	if object != nil {
		names = chunkKeys[:]
	}
	s := &jsonscan.Scanner{B: data}
	return wholeText(s, func(i int) bool {
		switch i {
		case 0:
			return readStringAt(s, id)
		case 1:
			v, ok := s.Value()
			c.Error = v
			return ok
		case 2:
			return s.Null() || scanChoices(s, c)
		case 3:
			return readStringAt(s, object)
		}
		return readStringAt(s, typ)
	}, names...)
}

func scanChoices(s *jsonscan.Scanner, c *oaChunk) bool {
	return s.Array(func() bool {
		c.Choices = append(c.Choices, oaChoice{})
		ch := &c.Choices[len(c.Choices)-1]
		if s.Null() {
			return true // a zero choice, as encoding/json makes of null
		}
		return object(s, func(i int) bool {
			switch i {
			case 0:
				return readIntAt(s, &ch.Index)
			case 1:
				return s.Null() || scanDelta(s, ch)
			}
			return readStringSetAt(s, &ch.Finished, nil)
		}, "index", "delta", "finish_reason")
	})
}

func scanDelta(s *jsonscan.Scanner, ch *oaChoice) bool {
	return object(s, func(i int) bool {
		switch i {
		case 0:
			return readStringAt(s, nil)
		case 1:
			return readStringSetAt(s, &ch.HasContent, &ch.Content)
		case 2:
			v, ok := s.Value()
			ch.ToolCalls = v
			return ok
		case 3:
			v, ok := s.Value()
			ch.FunctionCall = v
			return ok
		}
		var r string
		sure := readStringAt(s, &r)
		ch.Reasoning = ch.Reasoning || r != ""
		return sure
	}, "role", "content", "tool_calls", "function_call", "reasoning_content", "reasoning")
}

// anEvent is what the splice reads of an Anthropic Messages event.
type anEvent struct {
	Type       string
	Index      int
	MessageID  string // message.id
	BlockType  string // content_block.type
	DeltaType  string // delta.type
	Text       string // delta.text
	StopReason bool   // delta.stop_reason is there and not null
}

// readAnEvent reads data into e, as readOAChunk reads a chunk.
func readAnEvent(data []byte, e *anEvent) error {
	*e = anEvent{}
	if scanAnEvent(data, e) {
		return nil
	}
	*e = anEvent{}
	var j anEventJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*e = anEvent{
		Type: j.Type, Index: j.Index, MessageID: j.Message.ID, BlockType: j.ContentBlock.Type,
		DeltaType: j.Delta.Type, Text: j.Delta.Text, StopReason: j.Delta.StopReason != nil,
	}
	return nil
}

// anEventJSON is anEvent as encoding/json reads it.
type anEventJSON struct {
	Type    string `json:"type"`
	Index   int    `json:"index"`
	Message struct {
		ID string `json:"id"`
	} `json:"message"`
	ContentBlock struct {
		Type string `json:"type"`
	} `json:"content_block"`
	Delta struct {
		Type       string  `json:"type"`
		Text       string  `json:"text"`
		StopReason *string `json:"stop_reason"`
	} `json:"delta"`
}

func scanAnEvent(data []byte, e *anEvent) bool {
	s := &jsonscan.Scanner{B: data}
	return wholeText(s, func(i int) bool {
		switch i {
		case 0:
			return readStringAt(s, &e.Type)
		case 1:
			return readIntAt(s, &e.Index)
		case 2:
			return scanOne(s, "id", &e.MessageID)
		case 3:
			return scanOne(s, "type", &e.BlockType)
		}
		return s.Null() || scanAnDelta(s, e)
	}, "type", "index", "message", "content_block", "delta")
}

func scanAnDelta(s *jsonscan.Scanner, e *anEvent) bool {
	return object(s, func(i int) bool {
		switch i {
		case 0:
			return readStringAt(s, &e.DeltaType)
		case 1:
			return readStringAt(s, &e.Text)
		}
		return readStringSetAt(s, &e.StopReason, nil)
	}, "type", "text", "stop_reason")
}

// scanProbe reads data for its object and type, as detectAPI's probe, and
// reports whether data is a valid JSON text whose object and type it
// could be sure to read as json.Unmarshal would.
func scanProbe(data []byte, object, typ *string) bool {
	s := &jsonscan.Scanner{B: data}
	return wholeText(s, func(i int) bool {
		if i == 0 {
			return readStringAt(s, object)
		}
		return readStringAt(s, typ)
	}, "object", "type")
}

// scanOne reads the value at s, null or an object, for the string member
// name.
func scanOne(s *jsonscan.Scanner, name string, dst *string) bool {
	return s.Null() || object(s, func(int) bool { return readStringAt(s, dst) }, name)
}

// wholeText walks s's B, a whole JSON text, as object walks an object, and
// also holds it to JSON's grammar as json.Valid does (see
// jsonscan.Scanner's Strict): a text it is sure of needs no json.Valid
// first, which would cost each event a second pass. read walks the
// members' values with s.
func wholeText(s *jsonscan.Scanner, read func(i int) bool, names ...string) bool {
	s.Strict = true
	return object(s, read, names...) && s.End()
}

// object walks the object at s in place, calling read with the place in
// names of each member whose key is one of them, while s is at its value,
// which read must walk or skip; it skips the others. It reports whether
// it could be sure to read the object as json.Unmarshal would: read said
// so each time, and known found no key to doubt.
func object(s *jsonscan.Scanner, read func(i int) bool, names ...string) bool {
	var seen keySet
	return s.Object(func(key []byte) bool {
		switch i := known(key, &seen, names...); {
		case i == unsure:
			return false
		case i >= 0:
			return read(i)
		}
		return s.Skip()
	})
}

// A keySet is the known keys an object has had, by their place in the
// list given to known.
type keySet uint8

// unsure is what known returns for a key that encoding/json might read
// otherwise than as written: it may match one of the names, or it has
// matched one already.
const unsure = -2

// known returns the place in names of key, a member's raw key, or -1 if
// it is none of them, or unsure.
func known(key []byte, seen *keySet, names ...string) int {
	for i, n := range names {
		if string(key) == n {
			if *seen&(1<<i) != 0 {
				return unsure // a key given twice: encoding/json merges objects
			}
			*seen |= 1 << i
			return i
		}
	}
	// encoding/json matches keys without regard to case, Unicode's
	// special folds included, and after their escapes.
	if bytes.IndexByte(key, '\\') >= 0 {
		return unsure
	}
	for _, c := range key {
		if c >= 0x80 {
			return unsure
		}
	}
	for _, n := range names {
		// Both are ASCII: only one as long can fold to the other.
		if len(key) == len(n) && strings.EqualFold(string(key), n) {
			return unsure
		}
	}
	return -1
}

// isNull reports whether v is JSON's null.
func isNull(v []byte) bool { return string(v) == "null" }

// readStringAt reads the value at s as readString reads v.
func readStringAt(s *jsonscan.Scanner, dst *string) bool {
	v, ok := s.Value()
	return ok && readString(v, dst)
}

// readStringSetAt is readStringAt that also sets *set to whether the
// value was not null.
func readStringSetAt(s *jsonscan.Scanner, set *bool, dst *string) bool {
	v, ok := s.Value()
	*set = !isNull(v)
	return ok && readString(v, dst)
}

// readIntAt reads the value at s as readInt reads v.
func readIntAt(s *jsonscan.Scanner, dst *int) bool {
	v, ok := s.Value()
	return ok && readInt(v, dst)
}

// readString reads v, a string or null, into *dst if dst is not nil (null
// leaves it), and reports whether v was one of those.
func readString(v []byte, dst *string) bool {
	switch {
	case isNull(v):
		return true
	case len(v) < 2 || v[0] != '"':
		return false
	}
	if dst != nil {
		*dst = jsonString(v)
	}
	return true
}

// readInt reads v, an integer or null, into *dst (null leaves it), and
// reports whether v was one of those, as encoding/json reads it into an
// int.
func readInt(v []byte, dst *int) bool {
	if isNull(v) {
		return true
	}
	n, ok := wholeNumber(v)
	if !ok || int64(int(n)) != n {
		return false
	}
	*dst = int(n)
	return true
}
