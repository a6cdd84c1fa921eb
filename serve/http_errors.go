package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// writeJSON writes v as the JSON body of a response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the response failed","type":"server_error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// openAIError is the body of an OpenAI error response.
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// refuse answers a request with an error: on Megatron's /api its message as a JSON
// string, as Flask-RESTful writes Megatron's refusals; elsewhere OpenAI's error object,
// with param naming the offending field if any.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, msg, param string) {
	if r.URL.Path == "/api" {
		writeJSON(w, status, msg)
		return
	}
	var e openAIError
	e.Error.Message = msg
	e.Error.Type = errorType(status)
	if param != "" {
		e.Error.Param = &param
	}
	if status == http.StatusNotFound {
		code := "model_not_found"
		e.Error.Code = &code
	}
	writeJSON(w, status, e)
}

// errorType is OpenAI's error type for an HTTP status.
func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// A requestError is a request the server refuses: its status, message and the field at
// fault ("" when none).
type requestError struct {
	status int
	msg    string
	param  string
}

func (e *requestError) Error() string { return e.msg }

// badRequest returns a 400 requestError about field param.
func badRequest(param, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...), param: param}
}

// refuseErr answers with err: a *requestError as it says, an oversized body with 413, a
// Submit error with submitStatus, anything else with 400.
func (s *Server) refuseErr(w http.ResponseWriter, r *http.Request, err error) {
	var re *requestError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &re):
		s.refuse(w, r, re.status, re.msg, re.param)
	case errors.As(err, &tooBig):
		s.refuse(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", tooBig.Limit), "")
	default:
		s.refuse(w, r, submitStatus(err), err.Error(), "")
	}
}

// readBody reads the whole request body (bounded by guard's MaxBytesReader).
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, badRequest("", "request body is empty: want a JSON object")
	}
	return b, nil
}

// decodeStrict decodes the JSON object body into v, refusing unknown fields and values of
// the wrong type with a message naming the field.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &typeErr):
		typeErr.Field = strings.ReplaceAll(typeErr.Field, "openAIParams.", "") // the embedded struct of shared fields
		if typeErr.Field == "" {
			return badRequest("", "request body must be a JSON object, not %s", typeErr.Value)
		}
		return badRequest(typeErr.Field, "%s: got %s, want %s", typeErr.Field, typeErr.Value, jsonTypeName(typeErr.Type.String()))
	case errors.As(err, &syntaxErr):
		return badRequest("", "request body is not valid JSON: %v (at byte %d)", err, syntaxErr.Offset)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badRequest(field, "unknown field %q", field)
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return err
	}
	return badRequest("", "request body: %v", err)
}

// jsonTypeName names a Go type the way a JSON user thinks of it.
func jsonTypeName(goType string) string {
	switch {
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "float"):
		return "a number"
	case strings.Contains(goType, "bool"):
		return "a boolean"
	case strings.Contains(goType, "string"):
		return "a string"
	case strings.HasPrefix(goType, "[]"), strings.HasPrefix(goType, "*[]"):
		return "an array"
	}
	return "an object"
}
