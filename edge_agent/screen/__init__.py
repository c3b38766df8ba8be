"""The kiosk's screen: live captions of what the caller said and of what the listener heard,
word by word on the device's clock, and a stop button (`captions` holds what it shows,
`server` serves it from the agent's loop)."""
