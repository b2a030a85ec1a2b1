package gguf

// ValidFile is validFile for the external test package.
var ValidFile = validFile
