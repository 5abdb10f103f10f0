"""The broker's calls to the NameServers."""
