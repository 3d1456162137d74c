"""What operators watch a running process by: log formats, access logs and the request ids that
tie a call to the work it caused."""
