package server

import (
	"encoding/json"
	"strconv"
	"strings"
)

// scannedCall is one tool call found in a reply, complete or still being
// written: its name once its string is closed, and where its arguments'
// JSON starts and ends in the reply (argEnd -1 while it is open, argStart
// -1 before it starts).
type scannedCall struct {
	name             string
	named            bool
	argStart, argEnd int
}

// scanCalls finds the tool calls of a reply in t's format, as far as it
// goes: finished ones and the one being written last. It reads the text
// as a stream, so that a streamed reply's calls can be sent as they come.
func scanCalls(t *toolUse, text string) []scannedCall {
	var out []scannedCall
	// add collects the calls of one JSON value that starts at off: the
	// values at the paths isCall accepts.
	add := func(off int, isCall func(path string) bool) int {
		vals, end := scanJSON(text[off:])
		byPath := map[string]int{}
		for i, v := range vals {
			byPath[v.path] = i
		}
		for _, v := range vals {
			if !isCall(v.path) || text[off+v.start] != '{' {
				continue
			}
			c := scannedCall{argStart: -1, argEnd: -1}
			if i, ok := byPath[v.path+"/name"]; ok && vals[i].isStr && vals[i].end >= 0 {
				c.name, c.named = vals[i].str, true
			}
			if i, ok := byPath[v.path+"/"+t.argsKey()]; ok {
				c.argStart = off + vals[i].start
				if vals[i].end >= 0 {
					c.argEnd = off + vals[i].end
				}
			}
			out = append(out, c)
		}
		if end < 0 {
			return -1
		}
		return off + end
	}
	top := func(path string) bool { return path == "" }
	element := func(prefix string) func(string) bool {
		return func(path string) bool {
			rest, ok := strings.CutPrefix(path, prefix+"/")
			if !ok {
				return false
			}
			_, err := strconv.Atoi(rest)
			return err == nil
		}
	}
	start := len(text) - len(strings.TrimLeft(text, " \t\n\r"))
	switch t.style {
	case styleHermes:
		for off := 0; ; {
			i := strings.Index(text[off:], "<tool_call>")
			if i < 0 {
				break
			}
			off = add(off+i+len("<tool_call>"), top)
			if off < 0 {
				break
			}
		}
	case styleLlama3:
		if strings.HasPrefix(text[start:], "{") {
			add(start, top)
		}
	case styleMistral:
		if rest, ok := strings.CutPrefix(text[start:], "[TOOL_CALLS]"); ok {
			add(len(text)-len(rest), element(""))
		}
	default:
		add(start, func(path string) bool { return path == "/tool_call" || element("/tool_calls")(path) })
	}
	return out
}

// jsonValue is one value scanJSON met: its path (keys and array indexes
// from the top, each after a slash), where it starts and ends in the text
// (end -1 while open), and a string's value.
type jsonValue struct {
	path       string
	start, end int
	str        string
	isStr      bool
}

// scanJSON reads the JSON value at the start of s (after whitespace) as
// far as s goes, and returns the values in it in the order they start,
// and where the value ends (-1: s ends first). It does not check the
// JSON beyond what finding values needs: the constraint did.
func scanJSON(s string) ([]jsonValue, int) {
	type frame struct {
		obj     bool
		key     string
		idx     int
		wantKey bool
		val     int // the container's index in vals
	}
	var (
		vals    []jsonValue
		stack   []frame
		inStr   bool
		esc     bool
		isKey   bool
		strAt   int
		strVal  = -1
		scalar  = -1
		started bool
	)
	child := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := &stack[len(stack)-1]
		if f.obj {
			return vals[f.val].path + "/" + f.key
		}
		return vals[f.val].path + "/" + strconv.Itoa(f.idx)
	}
	begin := func(i int) int {
		started = true
		vals = append(vals, jsonValue{path: child(), start: i, end: -1})
		return len(vals) - 1
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
				var v string
				json.Unmarshal([]byte(s[strAt:i+1]), &v)
				if isKey {
					stack[len(stack)-1].key = v
				} else {
					vals[strVal].end, vals[strVal].str, vals[strVal].isStr = i+1, v, true
					if len(stack) == 0 {
						return vals, i + 1
					}
				}
			}
			continue
		}
		if scalar >= 0 {
			if !strings.ContainsRune(" \t\n\r,]}", rune(c)) {
				continue
			}
			vals[scalar].end, scalar = i, -1
			if len(stack) == 0 {
				return vals, i
			}
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			inStr, strAt = true, i
			isKey = len(stack) > 0 && stack[len(stack)-1].obj && stack[len(stack)-1].wantKey
			if !isKey {
				strVal = begin(i)
			}
		case '{', '[':
			v := begin(i)
			stack = append(stack, frame{obj: c == '{', wantKey: c == '{', val: v})
		case '}', ']':
			if len(stack) == 0 {
				return vals, -1
			}
			vals[stack[len(stack)-1].val].end = i + 1
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return vals, i + 1
			}
		case ':':
			if len(stack) > 0 {
				stack[len(stack)-1].wantKey = false
			}
		case ',':
			if len(stack) > 0 {
				if f := &stack[len(stack)-1]; f.obj {
					f.wantKey = true
				} else {
					f.idx++
				}
			}
		default:
			if started && len(stack) == 0 {
				return vals, -1
			}
			scalar = begin(i)
		}
	}
	return vals, -1
}
