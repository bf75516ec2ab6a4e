// placeholder: replaced by the Gloo transport
