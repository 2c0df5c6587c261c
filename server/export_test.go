package server

// CloseStore is closeStore, for its test.
var CloseStore = closeStore
