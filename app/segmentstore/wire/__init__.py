"""Pravega's segment-store wire protocol: the commands (`commands`) and their byte layouts (`codec`)."""
