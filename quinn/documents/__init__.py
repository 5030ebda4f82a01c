"""Documents and knowledge (issue 18): the files people attach, read, kept once per owner and searchable.

``extract`` reads a file into sections with their page, sheet or heading (one function per format in
``formats``), within limits, never raising: a file that cannot be read is a value naming the file and the
reason. ``library`` keeps the file by content hash and indexes its passages for conversation recall.
"""
