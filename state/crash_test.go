package state

func crashChild() {}
