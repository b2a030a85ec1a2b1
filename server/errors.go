package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// apiError is an error answered in OpenAI's shape.
type apiError struct {
	status  int
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	// retryAfter, when > 0, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *apiError) Error() string { return e.Message }

// OpenAI's error types.
const (
	typeInvalid   = "invalid_request_error"
	typeAuth      = "authentication_error"
	typeNotFound  = "not_found_error"
	typeRateLimit = "rate_limit_error"
	typeServer    = "server_error"
)

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// badRequest is a 400 invalid_request_error about param (may be "").
func badRequest(param, code, format string, a ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, Message: fmt.Sprintf(format, a...), Type: typeInvalid, Param: strp(param), Code: strp(code)}
}

// writeError answers err in OpenAI's error shape.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(struct {
		Error *apiError `json:"error"`
	}{e})
}

// writeJSON answers v with status 200 (500 if v does not encode: a NaN,
// say, so that a reply is never cut half-way).
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, &apiError{status: http.StatusInternalServerError, Message: "the reply could not be encoded: " + err.Error(), Type: typeServer})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}
