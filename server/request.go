package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
)

// bodyTimeout bounds the reading of a request body.
const bodyTimeout = time.Minute

// fields is a request body's top-level object, each field still raw, so
// that a field of the wrong type is named in the error and unknown fields
// are ignored.
type fields map[string]json.RawMessage

// readFields reads and parses a JSON object body of at most limit bytes,
// whatever its Content-Type says (curl -d sends a form's type).
func readFields(w http.ResponseWriter, r *http.Request, limit int64) (fields, *apiError) {
	// A client that sends its body slowly gets bodyTimeout, not for ever
	// (the deadline is lifted for the reply, which may stream for long).
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	rc.SetReadDeadline(time.Time{})
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("the request body is larger than the limit of %d bytes", limit), Type: typeInvalid, Code: strp("request_too_large")}
		}
		return nil, badRequest("", "", "reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("", "", "the request body is empty: send a JSON object")
	}
	var f fields
	if err := json.Unmarshal(body, &f); err != nil {
		if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return nil, badRequest("", "", "the request body must be a JSON object")
		}
		return nil, badRequest("", "invalid_json", "the request body is not valid JSON: %v", err)
	}
	if f == nil {
		return nil, badRequest("", "", "the request body must be a JSON object, not null")
	}
	return f, nil
}

// has reports whether name is present and not null.
func (f fields) has(name string) bool {
	raw, ok := f[name]
	return ok && !isNull(raw)
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// decode decodes field name into dst when it is present and not null,
// reporting a wrong type as a 400 naming the field (what wants is the type
// expected, for the message).
func (f fields) decode(name, wants string, dst any) (bool, *apiError) {
	raw, ok := f[name]
	if !ok || isNull(raw) {
		return false, nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return false, badRequest(name, "invalid_type", "%s must be %s", name, wants)
	}
	return true, nil
}

// integer decodes an integer field (JSON numbers with no fraction, in
// any notation) into an int64, saturating beyond ±2^62 so that limits
// compare it safely.
func (f fields) integer(name string) (int64, bool, *apiError) {
	if raw := bytes.TrimSpace(f[name]); len(raw) > 0 && raw[0] == '"' {
		return 0, false, badRequest(name, "invalid_type", "%s must be an integer, not a string", name)
	}
	var n json.Number
	ok, e := f.decode(name, "an integer", &n)
	if !ok || e != nil {
		return 0, ok, e
	}
	if i, err := n.Int64(); err == nil {
		return i, true, nil
	}
	x, err := n.Float64()
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false, badRequest(name, "invalid_type", "%s must be an integer", name)
	}
	if x != math.Trunc(x) || math.IsNaN(x) {
		return 0, false, badRequest(name, "invalid_type", "%s must be an integer, not %s", name, n)
	}
	const big = 1 << 62
	return int64(max(min(x, big), -big)), true, nil
}

// number decodes a finite number field.
func (f fields) number(name string) (float64, bool, *apiError) {
	var x float64
	ok, e := f.decode(name, "a number", &x)
	return x, ok, e
}

// boolean decodes a boolean field.
func (f fields) boolean(name string) (bool, *apiError) {
	var b bool
	_, e := f.decode(name, "a boolean", &b)
	return b, e
}

// str decodes a string field.
func (f fields) str(name string) (string, *apiError) {
	var s string
	_, e := f.decode(name, "a string", &s)
	return s, e
}
